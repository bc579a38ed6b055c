#!/bin/bash
# TEST FIXTURE (see docker-entrypoint.sh): the one check of the official image's healthcheck.sh
# that examples/mysql/statefulset.yaml uses. `--connect`: the server accepts TCP connections on
# localhost; a refused login still means it is up, as in the official script.
set -uo pipefail
[[ ${1:-} == --connect ]] || { echo "this fixture only has --connect" >&2; exit 2; }
output=$(mariadb --no-defaults -h localhost --protocol tcp -e 'select 1' 2>&1)
! grep -qF "Can't connect" <<<"$output"
