#!/usr/bin/env bash
# Benchmark: mysql-backup vs the plain shell pipeline, on a local MariaDB and a local Garage S3.
#
#   jobs/mysql-backup/bench/run.sh            # ~1 GiB of InnoDB data
#   BENCH_MIB=200 jobs/mysql-backup/bench/run.sh
#
# Measures, on the same data, one after the other:
#   (a) mysql-backup backup --to s3://...                      (parse + CRC + sha256 + multipart upload)
#   (b) mariadb-backup --backup --stream=xbstream | aws s3 cp - s3://...
#   (c) mariadb-backup --backup --stream=xbstream > /dev/null  (the tool alone: the floor)
#   (d) mysql-backup backup --to file://...  vs  (e) mariadb-backup ... > file  (overhead without S3)
# and prints wall time, throughput, peak RSS (GNU time) and the ratios the issue targets:
# (a) <= 1.10 x (c), (a) faster than (b), runner RSS <= 128 MiB and flat with size.
# Needs: mariadb-server, mariadb-backup, GNU time (/usr/bin/time), aws CLI, garage
# (e2e/install-deps.sh), and a release build (built here if missing).
# Env: BENCH_MIB (data size, default 1024), BENCH_RUNS (runs per case, best kept; default 3), BENCH_DIR (work dir, default a temp dir, removed),
#      MYSQL_BACKUP (binary; default target/release/mysql-backup), BENCH_EXTRA (extra flags for (a)).
set -euo pipefail

root=$(cd "$(dirname "$0")/../../.." && pwd)
mib=${BENCH_MIB:-1024}
work=${BENCH_DIR:-$(mktemp -d /tmp/mysql-backup-bench.XXXXXX)}
bin=${MYSQL_BACKUP:-$root/target/release/mysql-backup}
mkdir -p "$work"
[[ -x /usr/bin/time ]] || { echo "GNU time missing: apt-get install time" >&2; exit 1; }

cleanup() {
  [[ -f $work/mysqld.pid ]] && kill "$(cat "$work/mysqld.pid")" 2>/dev/null || true
  "$root/e2e/garage-up.sh" --stop "$work/garage" 2>/dev/null || true
  [[ -z ${BENCH_DIR:-} ]] && rm -rf "$work"
}
trap cleanup EXIT

if [[ ! -x $bin ]]; then
  (cd "$root" && cargo build --release -p mysql-backup)
fi

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

echo "== starting Garage"
eval "$("$root/e2e/garage-up.sh" "$work/garage" "$(port)" "$(port)" "$(port)")"
bucket=$GARAGE_BUCKET

echo "== starting MariaDB and loading ${mib} MiB"
datadir=$work/data sock=$work/mysqld.sock
mariadb-install-db --no-defaults --user=root --datadir="$datadir" --auth-root-authentication-method=socket --skip-test-db >/dev/null
mariadbd --no-defaults --user=root --datadir="$datadir" --socket="$sock" --skip-networking \
  --pid-file="$work/mysqld.pid" --log-error="$work/mysqld.err" --log-bin=bin --server-id=1 \
  --innodb-buffer-pool-size=256M --innodb-log-file-size=256M --innodb-flush-log-at-trx-commit=0 &
for _ in $(seq 300); do mariadb --no-defaults -uroot --socket="$sock" -e 'SELECT 1' >/dev/null 2>&1 && break; sleep 0.1; done
sql() { mariadb --no-defaults -uroot --socket="$sock" -e "$1"; }
sql "CREATE DATABASE bench; CREATE TABLE bench.t (id BIGINT PRIMARY KEY, v VARBINARY(1024)) ENGINE=InnoDB;"
# RANDOM_BYTES: incompressible rows, ~1 KiB each; batches of 64k rows.
rows=$((mib * 1024 * 1024 / 1100))
for ((start = 1; start <= rows; start += 65536)); do
  end=$((start + 65535 < rows ? start + 65535 : rows))
  sql "INSERT INTO bench.t SELECT seq, RANDOM_BYTES(1024) FROM bench.seq_${start}_to_${end};"
done
sql "FLUSH TABLES;"
data_bytes=$(du -sb "$datadir" | cut -f1)
echo "   data dir: $((data_bytes / 1048576)) MiB"

cnf=$work/client.cnf
(umask 077 && printf '[client]\nuser=root\nsocket=%s\n' "$sock" >"$cnf")
tool=(mariadb-backup --defaults-extra-file="$cnf" --backup --stream=xbstream --datadir="$datadir")

# measure NAME CMD...: BENCH_RUNS runs under GNU time; keeps the best wall time (the machine may
# be shared) and the highest peak RSS.
declare -A secs rss
measure() {
  local name=$1; shift
  local run wall t k
  for ((run = 1; run <= ${BENCH_RUNS:-3}; run++)); do
    rm -rf "$work/target" && mkdir -p "$work/target"
    /usr/bin/time -v -o "$work/time.$name" "$@" >"$work/out.$name" 2>"$work/err.$name" || {
      tail -5 "$work/err.$name" >&2; echo "$name failed" >&2; exit 1; }
    wall=$(awk -F': ' '/Elapsed \(wall clock\)/{print $2}' "$work/time.$name")
    t=$(awk -v t="$wall" 'BEGIN{n=split(t,p,":"); s=0; for(i=1;i<=n;i++) s=s*60+p[i]; print s}')
    k=$(awk -F': ' '/Maximum resident set size/{print $2}' "$work/time.$name")
    if [[ -z ${secs[$name]:-} ]] || awk -v a="$t" -v b="${secs[$name]}" 'BEGIN{exit !(a<b)}'; then secs[$name]=$t; fi
    if [[ -z ${rss[$name]:-} ]] || ((k > rss[$name])); then rss[$name]=$k; fi
    [[ $name == a_* ]] && grep -o '"peakRssMiB":[0-9.]*' "$work/out.$name" | cut -d: -f2 >>"$work/runner-rss"
  done
  printf '%-26s best %7.2f s   peak RSS %7.1f MiB\n' "$name" "${secs[$name]}" "$(awk -v k="${rss[$name]}" 'BEGIN{print k/1024}')"
}

echo "== measuring (same data, sequentially)"
export AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY
# (c) first, so the page cache is equally warm for the other two.
measure c_tool_to_devnull "${tool[@]}" --target-dir="$work/target"
measure a_mysql_backup_to_s3 env MYSQL_BACKUP_USER=root "$bin" backup --socket "$sock" --datadir "$datadir" \
  --to "s3://$bucket/bench/a.xbstream" --s3-endpoint "$AWS_ENDPOINT_URL" --s3-region "$AWS_REGION" \
  --s3-force-path-style --tool-arg=--target-dir="$work/target" ${BENCH_EXTRA:-}
measure b_tool_pipe_aws_s3_cp bash -o pipefail -c \
  "${tool[*]} --target-dir=$work/target | aws --endpoint-url $AWS_ENDPOINT_URL s3 cp - s3://$bucket/bench/b.xbstream"
# Extra pair, without the S3 server: the runner's own overhead writing to a local file vs the
# tool redirected into a file on the same disk.
measure d_mysql_backup_to_file env MYSQL_BACKUP_USER=root "$bin" backup --socket "$sock" --datadir "$datadir" \
  --to "file://$work/d.xbstream" --tool-arg=--target-dir="$work/target"
measure e_tool_to_file bash -o pipefail -c "${tool[*]} --target-dir=$work/target > $work/e.xbstream"

# Runner RSS alone (GNU time on (a) includes the mariadb-backup child).
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.2f", a/b}'; }
stream=$(grep -o '"streamBytes":[0-9]*' "$work/out.a_mysql_backup_to_s3" | cut -d: -f2)
echo "== results (${mib} MiB requested; xbstream $((stream / 1048576)) MiB; data dir incl. redo/binlogs $((data_bytes / 1048576)) MiB)"
for n in a_mysql_backup_to_s3 b_tool_pipe_aws_s3_cp c_tool_to_devnull d_mysql_backup_to_file e_tool_to_file; do
  printf '%-26s %8.2f s %8.1f MiB/s\n' "$n" "${secs[$n]}" "$(awk -v b="$stream" -v s="${secs[$n]}" 'BEGIN{print b/1048576/s}')"
done
echo "(a)/(c) wall = $(ratio "${secs[a_mysql_backup_to_s3]}" "${secs[c_tool_to_devnull]}")  (target <= 1.10)"
echo "(a)/(b) wall = $(ratio "${secs[a_mysql_backup_to_s3]}" "${secs[b_tool_pipe_aws_s3_cp]}")  (target < 1.00)"
echo "(d)/(e) wall = $(ratio "${secs[d_mysql_backup_to_file]}" "${secs[e_tool_to_file]}")  (runner overhead without S3)"
echo "peak RSS of the process tree: (a) $((rss[a_mysql_backup_to_s3] / 1024)) MiB, (b) $((rss[b_tool_pipe_aws_s3_cp] / 1024)) MiB, (c) $((rss[c_tool_to_devnull] / 1024)) MiB"
echo "runner alone (VmHWM, max over runs): $(sort -n "$work/runner-rss" | tail -1) MiB"
echo "note: GNU time reports the largest single process of the tree; for (a) that is max(runner, mariadb-backup)."
