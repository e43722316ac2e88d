"""Operations on whole stores: the session catalog, copy/export/import, the SDK's layouts."""
