#!/usr/bin/env bash
# Start the local servers the tests use (PostgreSQL, MariaDB, Redis) when they are not up.
# Idempotent; uses the commands this machine kind documents. Waits until each accepts connections.
set -u

up() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

wait_for() { # name port
  for _ in $(seq 1 60); do up "$2" && return 0; sleep 0.5; done
  echo "start-services: $1 did not come up on port $2" >&2
  return 1
}

status=0
if ! up 6379; then
  echo "start-services: starting Redis"
  mkdir -p /var/lib/redis /var/log/redis
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/ci.log || true
  wait_for Redis 6379 || status=1
fi
if ! up 5432; then
  echo "start-services: starting PostgreSQL"
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n 1)" main start || true
  wait_for PostgreSQL 5432 || status=1
fi
if ! up 3306; then
  echo "start-services: starting MariaDB"
  start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd || true
  wait_for MariaDB 3306 || status=1
fi
# The test databases exist on a new machine; create them if someone dropped them.
if command -v psql >/dev/null && up 5432; then
  psql -h 127.0.0.1 -U postgres -tAc "SELECT 1 FROM pg_database WHERE datname='test'" 2>/dev/null \
    | grep -q 1 || psql -h 127.0.0.1 -U postgres -c "CREATE DATABASE test" >/dev/null 2>&1 || true
fi
if command -v mariadb >/dev/null && up 3306; then
  mariadb -h 127.0.0.1 -u root -e "CREATE DATABASE IF NOT EXISTS test" >/dev/null 2>&1 || true
fi
exit $status
