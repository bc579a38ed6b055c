#!/bin/bash
# TEST FIXTURE, not the official image's script. The bed cannot pull the official `mariadb` image
# that examples/mysql/statefulset.yaml names, so its stand-in (localhost/mariadb-fixture, made by
# e2e/cluster/images.sh from Debian 12's packages) provides the part of that image's interface the
# example relies on, and nothing more:
#   - run as any non-root user, the server in the foreground (`mariadbd`, the default command);
#   - an empty data dir is initialised first: root's password from MARIADB_ROOT_PASSWORD (or
#     MARIADB_ROOT_PASSWORD_FILE), root@localhost and root@%, then /docker-entrypoint-initdb.d/*.sql
#     and *.sh in name order, on a temporary server without networking;
#   - a data dir that holds a database (`mysql/` exists: a restore or a clone put it there) is
#     started as it is.
set -euo pipefail

log() { echo "$(date -u +%FT%TZ) [entrypoint] $*" >&2; }

if [[ $# == 0 || ${1:0:1} == - ]]; then set -- mariadbd "$@"; fi
if [[ $1 != mariadbd && $1 != mysqld ]]; then exec "$@"; fi

datadir=/var/lib/mysql
socket=/run/mysqld/mysqld.sock

if [[ ! -d $datadir/mysql ]]; then
  if [[ -n ${MARIADB_ROOT_PASSWORD_FILE:-} ]]; then
    MARIADB_ROOT_PASSWORD=$(<"$MARIADB_ROOT_PASSWORD_FILE")
  fi
  [[ -n ${MARIADB_ROOT_PASSWORD:-} ]] || { log "the data dir is empty and MARIADB_ROOT_PASSWORD is not set"; exit 1; }
  log "initialising $datadir"
  mariadb-install-db --datadir="$datadir" --rpm --auth-root-authentication-method=normal \
    --skip-test-db --skip-name-resolve --skip-log-bin >/dev/null
  "$@" --skip-networking --socket="$socket" --skip-slave-start --skip-log-bin &
  temp=$!
  for _ in $(seq 60); do
    mariadb-admin --socket="$socket" -uroot ping >/dev/null 2>&1 && break
    kill -0 "$temp" 2>/dev/null || { log "the temporary server stopped"; exit 1; }
    sleep 1
  done
  # SQL string literal: backslashes and quotes escaped.
  password=${MARIADB_ROOT_PASSWORD//\\/\\\\}
  password=${password//\'/\\\'}
  mariadb --socket="$socket" -uroot <<SQL
DELETE FROM mysql.user WHERE user NOT IN ('mariadb.sys', 'root') OR host <> 'localhost';
SET PASSWORD FOR 'root'@'localhost' = PASSWORD('$password');
CREATE USER 'root'@'%' IDENTIFIED BY '$password';
GRANT ALL ON *.* TO 'root'@'%' WITH GRANT OPTION;
FLUSH PRIVILEGES;
SQL
  export MYSQL_PWD=$MARIADB_ROOT_PASSWORD
  for f in /docker-entrypoint-initdb.d/*; do
    case $f in
      *.sql) log "running $f"; mariadb --socket="$socket" -uroot <"$f" ;;
      *.sh) log "running $f"; . "$f" ;;
      *) [[ -e $f ]] && log "ignoring $f" ;;
    esac
  done
  unset MYSQL_PWD
  MYSQL_PWD=$MARIADB_ROOT_PASSWORD mariadb-admin --socket="$socket" -uroot shutdown
  wait "$temp" || true
  log "initialised"
fi
exec "$@"
