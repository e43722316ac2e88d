"""Protocol layer: the base session, item codec, id rules, capabilities and URL registry."""
