#!/usr/bin/env bash
# Starts a real Kubernetes control plane (the kubelet bed's version: 1.37, or KUBE_VERSION=1.35)
# on 127.0.0.1 only: its own etcd, kube-apiserver and kube-controller-manager (no kubelet: pods
# stay Pending), each on a free loopback port. Binaries come from e2e/cluster/build.sh. Each test
# process that needs only the API starts one of these: lighter than the machine's one kubelet bed,
# and no test sees another process's objects.
#
#   up.sh [--watch-pid PID [--rm]] DIR
#                                 start in DIR (created; certs, tokens, data, logs and pids go
#                                 there), wait until /readyz is ok, write DIR/kubeconfig and
#                                 print `export KUBECONFIG=DIR/kubeconfig`. With --watch-pid,
#                                 a watcher stops everything once process PID is gone (and with
#                                 --rm then deletes DIR).
#   up.sh --stop DIR              stop everything started in DIR and wait until it is gone.
#
#   KUBE_VERSION          1.37 (default) or 1.35
#   KUBE_TESTBED_BIN      dir with the Kubernetes binaries (default: build.sh's cache)
#   KUBE_TESTBED_TIMEOUT  seconds to wait for each server (default 120)
#   ETCD_SERVERS          an etcd to store in instead of starting one (e.g. one restored from a
#                         backup, to read what it holds through the API)
#
# DIR/etcd-endpoint holds the etcd client URL the API server stores in.
# The admin user (token in DIR/kubeconfig) is in system:masters; authorization is RBAC.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../cluster/versions.sh
source "$here/../cluster/versions.sh"
bin=$kube_bin
etcd=$(etcd_bin "$control_plane_etcd")/etcd
timeout=${KUBE_TESTBED_TIMEOUT:-120}
servers=(kube-controller-manager kube-apiserver etcd) # stop order

log() { echo "up.sh: $*" >&2; }
usage() { echo "usage: $0 [--watch-pid PID [--rm]] DIR | --stop DIR" >&2; exit 2; }

# alive, recorded_pid, free_port
# shellcheck source=../lib/processes.sh
source "$here/../lib/processes.sh"

stop() {
  local dir=$1 name pid i
  for name in "${servers[@]}"; do
    pid=$(recorded_pid "$dir" "$name") || { rm -f "$dir/$name.pid"; continue; }
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do alive "$pid" || break; sleep 0.1; done
    if alive "$pid"; then
      log "$name ($pid) ignored SIGTERM for 10 s; killing it"
      kill -KILL "$pid" 2>/dev/null || true
      for ((i = 0; i < 100; i++)); do alive "$pid" || break; sleep 0.1; done
    fi
    alive "$pid" && { log "$name ($pid) does not die"; return 1; }
    rm -f "$dir/$name.pid"
  done
  # The watcher, unless this is the watcher itself stopping things.
  pid=$(cat "$dir/watcher.pid" 2>/dev/null) || true
  if [[ -n $pid && -z ${KUBE_TESTBED_WATCHER:-} ]] && alive "$pid"; then
    # The watcher first (so it does not go on to stop and delete once its `tail` ends), then
    # its `tail --pid`.
    local tails
    tails=$(pgrep -P "$pid" || true)
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 50; i++)); do alive "$pid" || break; sleep 0.1; done
    for i in $tails; do kill -TERM "$i" 2>/dev/null || true; done
  fi
  rm -f "$dir/watcher.pid"
}

watch_pid='' rm_dir=0
case ${1:-} in
  --stop)
    [[ $# == 2 ]] || usage
    stop "$2"
    exit 0
    ;;
  --watch-pid)
    [[ $# -ge 2 && $2 =~ ^[0-9]+$ ]] || usage
    watch_pid=$2
    shift 2
    [[ ${1:-} == --rm ]] && { rm_dir=1; shift; }
    ;;
esac
[[ $# == 1 && $1 != -* ]] || usage
mkdir -p "$1"
dir=$(cd "$1" && pwd)

for b in "$bin/kube-apiserver" "$bin/kube-controller-manager" "$etcd"; do
  if [[ ! -x $b ]]; then
    log "no $b: build it first with $here/../cluster/build.sh (once; cached)"
    exit 1
  fi
done
for tool in openssl curl; do
  command -v "$tool" >/dev/null || { log "$tool is missing: run $here/../install-deps.sh"; exit 1; }
done
for name in "${servers[@]}"; do
  if pid=$(recorded_pid "$dir" "$name"); then
    log "$name already runs in $dir (pid $pid): stop it first with $0 --stop $dir"
    exit 1
  fi
done

# On any failure (fail or an error under set -e): stop what was started.
ready=
trap 'if [[ -z $ready ]]; then stop "$dir" || true; fi' EXIT

# Log tail, non-zero exit.
fail() {
  local name=$1 msg=$2
  log "$msg; last lines of $dir/$name.log:"
  tail -n 30 "$dir/$name.log" >&2 || true
  exit 1
}

# Starts NAME (a binary) with ARGS in the background, detached from our stdout (whoever reads
# it would wait for the servers otherwise) and from our process group.
start() {
  local name=$1 exe=$2
  shift 2
  setsid "$exe" "$@" </dev/null >"$dir/$name.log" 2>&1 &
  echo $! >"$dir/$name.pid"
}

# Waits until `curl ARGS URL` answers with a body matching PATTERN, while NAME runs.
wait_ready() {
  local name=$1 pattern=$2 url=$3 started=$SECONDS pid body=
  shift 3
  pid=$(cat "$dir/$name.pid")
  while ((SECONDS - started < timeout)); do
    alive "$pid" || fail "$name" "$name exited before it was ready"
    body=$(curl -sS --max-time 5 "$@" "$url" 2>&1) || true
    [[ $body =~ $pattern ]] && return 0
    sleep 0.25
  done
  fail "$name" "$name not ready after $timeout s ($url answered: ${body:0:300})"
}

etcd_port="" etcd_peer_port="" api_port="" kcm_port=""
free_port etcd_port
free_port etcd_peer_port
free_port api_port
free_port kcm_port

# Certificates: a CA, the apiserver's serving cert (SAN IP:127.0.0.1), a service account key.
pki=$dir/pki
mkdir -p "$pki"
if [[ ! -f $pki/serving.crt ]]; then
  openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj /CN=testbed-ca \
    -keyout "$pki/ca.key" -out "$pki/ca.crt" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj /CN=kube-apiserver \
    -keyout "$pki/serving.key" -out "$pki/serving.csr" 2>/dev/null
  printf '%s\n' 'subjectAltName=IP:127.0.0.1,DNS:localhost' \
    'extendedKeyUsage=serverAuth' 'keyUsage=critical,digitalSignature,keyEncipherment' >"$pki/serving.ext"
  openssl x509 -req -in "$pki/serving.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" \
    -CAcreateserial -days 3650 -extfile "$pki/serving.ext" -out "$pki/serving.crt" 2>/dev/null
  openssl genrsa -out "$pki/sa.key" 2048 2>/dev/null
  openssl rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null
fi
if [[ ! -f $dir/tokens.csv ]]; then
  (
    umask 077
    printf '%s,admin,admin,"system:masters"\n' "$(openssl rand -hex 24)" >"$dir/tokens.csv"
    printf '%s,system:kube-controller-manager,kcm,"system:masters"\n' "$(openssl rand -hex 24)" >>"$dir/tokens.csv"
  )
fi
admin_token=$(sed -n 1p "$dir/tokens.csv" | cut -d, -f1)
kcm_token=$(sed -n 2p "$dir/tokens.csv" | cut -d, -f1)
server=https://127.0.0.1:$api_port

kubeconfig() { # USER TOKEN
  cat <<KUBECONFIG
apiVersion: v1
kind: Config
clusters:
- name: testbed
  cluster:
    server: $server
    certificate-authority-data: $(base64 -w0 "$pki/ca.crt")
users:
- name: $1
  user:
    token: $2
contexts:
- name: testbed
  context:
    cluster: testbed
    user: $1
    namespace: default
current-context: testbed
KUBECONFIG
}

# The watcher first, so that even a failed start is cleaned up if the caller dies meanwhile.
if [[ -n $watch_pid ]]; then
  # shellcheck disable=SC2016 # expanded by the inner bash
  setsid bash -c 'tail --pid="$1" -f /dev/null
    KUBE_TESTBED_WATCHER=1 "$2" --stop "$3" && if [[ $4 == 1 ]]; then rm -rf "$3"; fi' \
    watcher "$watch_pid" "$here/up.sh" "$dir" "$rm_dir" </dev/null >>"$dir/watcher.log" 2>&1 &
  echo $! >"$dir/watcher.pid"
fi

etcd_servers=${ETCD_SERVERS:-}
if [[ -z $etcd_servers ]]; then
  etcd_servers=http://127.0.0.1:$etcd_port
  log "etcd on 127.0.0.1:$etcd_port"
  start etcd "$etcd" --name testbed --logger zap --data-dir "$dir/etcd-data" \
    --listen-client-urls "$etcd_servers" --advertise-client-urls "$etcd_servers" \
    --listen-peer-urls "http://127.0.0.1:$etcd_peer_port" \
    --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer_port" \
    --initial-cluster "testbed=http://127.0.0.1:$etcd_peer_port" --initial-cluster-token testbed
  wait_ready etcd '"health": ?"true"' "$etcd_servers/health"
else
  log "storing in the etcd at $etcd_servers"
fi
echo "$etcd_servers" >"$dir/etcd-endpoint"

log "kube-apiserver on $server"
start kube-apiserver "$bin/kube-apiserver" \
  --etcd-servers "$etcd_servers" \
  --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$api_port" \
  --tls-cert-file "$pki/serving.crt" --tls-private-key-file "$pki/serving.key" \
  --cert-dir "$dir/apiserver-certs" \
  --client-ca-file "$pki/ca.crt" --token-auth-file "$dir/tokens.csv" \
  --authorization-mode RBAC \
  --service-cluster-ip-range 10.0.0.0/24 \
  --disable-admission-plugins ServiceAccount \
  --service-account-key-file "$pki/sa.pub" --service-account-signing-key-file "$pki/sa.key" \
  --service-account-issuer https://kubernetes.default.svc \
  --endpoint-reconciler-type none \
  --profiling=false
# /readyz answers 403 until the RBAC bootstrap is done (about 2 s), then ok.
wait_ready kube-apiserver '^ok$' "$server/readyz" --cacert "$pki/ca.crt" -H "Authorization: Bearer $admin_token"

(umask 077; kubeconfig system:kube-controller-manager "$kcm_token" >"$dir/kcm.kubeconfig")
log "kube-controller-manager on 127.0.0.1:$kcm_port"
start kube-controller-manager "$bin/kube-controller-manager" \
  --kubeconfig "$dir/kcm.kubeconfig" \
  --authentication-kubeconfig "$dir/kcm.kubeconfig" --authorization-kubeconfig "$dir/kcm.kubeconfig" \
  --leader-elect=false --bind-address 127.0.0.1 --secure-port "$kcm_port" \
  --cert-dir "$dir/kcm-certs" \
  --service-account-private-key-file "$pki/sa.key" --root-ca-file "$pki/ca.crt" \
  --profiling=false
wait_ready kube-controller-manager '^ok$' "https://127.0.0.1:$kcm_port/healthz" -k

(umask 077; kubeconfig admin "$admin_token" >"$dir/kubeconfig.tmp" && mv "$dir/kubeconfig.tmp" "$dir/kubeconfig")
ready=1
log "ready in $SECONDS s (logs and pids in $dir; stop with $0 --stop $dir)"
echo "export KUBECONFIG=$dir/kubeconfig"
