#!/usr/bin/env bash
# Starts a real single-node Kubernetes (1.37 by default, 1.35 with KUBE_VERSION=1.35; versions.sh)
# whose kubelet runs pods, on this machine only, every part built from its Go module by build.sh:
# etcd, kube-apiserver, kube-controller-manager, kube-scheduler, containerd 2 + runc, kubelet,
# kube-proxy (iptables), a CNI bridge 10.88.0.1/16 with no default route and no masquerade (no pod
# traffic leaves the machine), dnsmasq as cluster DNS and the bed agent (DNS records for Services
# and headless pods, a directory-backed default StorageClass). Images come from images.sh.
# See shared/reference/test-cluster-with-kubelet.md for why each setting is what it is.
#
#   up.sh [--watch-pid PID [--rm]] DIR
#         Starts the bed in DIR (or, if it already runs there, just adds PID to its users) and
#         prints `export KUBECONFIG=DIR/kubeconfig`. With --watch-pid, the bed stops once every
#         process that started or joined it that way is gone (and with --rm, DIR is deleted).
#         A bed that starts has no objects, volumes or pods from an earlier bed in DIR.
#   up.sh --stop DIR
#         Stops everything and leaves nothing behind: processes, containers, mounts, CNI netns,
#         the bridge, KUBE-* iptables chains, kubepods cgroups; changed sysctls are restored.
#
#   KUBE_VERSION           1.37 (default) or 1.35
#   KUBE_TESTBED_BIN       the Kubernetes binaries (default: build.sh's cache)
#   BED_BINARIES           project binaries for the localhost/<name>:dev images (default target/debug)
#   BED_AGENT              the bed agent binary (default: BED_BINARIES/bed-agent, built if missing)
#   KUBE_TESTBED_TIMEOUT   seconds to wait for each part (default 120)
#
# One bed per machine (kubelet writes to fixed host paths): /run/etcd-backup-suite-bed names the
# running bed's DIR.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source=versions.sh
source "$here/versions.sh"
bin=$kube_bin
etcd=$(etcd_bin "$control_plane_etcd")/etcd
binaries=${BED_BINARIES:-${CARGO_TARGET_DIR:-$repo/target}/debug}
timeout=${KUBE_TESTBED_TIMEOUT:-120}
machine_lock=/run/lock/etcd-backup-suite-bed.lock
machine_owner=/run/etcd-backup-suite-bed

bridge=ebsbed0 gateway=10.88.0.1 pod_cidr=10.88.0.0/16 service_cidr=10.96.0.0/24 node=testbed
api_port=6443
# Stop order. containerd goes after the kubelet, and its containers are cleaned up in between.
parts=(bed-agent kube-proxy kubelet kube-scheduler kube-controller-manager kube-apiserver dnsmasq etcd)
# What the kubelet and kube-proxy may change; recorded before start, restored on stop.
sysctls=(net.ipv4.ip_forward net.bridge.bridge-nf-call-iptables net.bridge.bridge-nf-call-ip6tables
  net.ipv4.conf.all.route_localnet vm.overcommit_memory vm.panic_on_oom kernel.panic
  kernel.panic_on_oops kernel.keys.root_maxkeys kernel.keys.root_maxbytes)

# Fixed host paths the kubelet, containerd (shim sockets) and CNI (netns) create; removed on stop
# when this bed created them.
host_paths=(/var/log/pods /var/log/containers /var/lib/kubelet /run/containerd /run/netns)

log() { echo "up.sh: $*" >&2; }
die() { log "$*"; exit 1; }
usage() { echo "usage: $0 [--watch-pid PID [--rm]] DIR | --stop DIR" >&2; exit 2; }

# alive, recorded_pid, free_port
# shellcheck source=../lib/processes.sh
source "$here/../lib/processes.sh"

# TERM, then KILL after 10 s; waits until PID is gone.
terminate() {
  local name=$1 pid=$2 i
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < 100; i++)); do alive "$pid" || return 0; sleep 0.1; done
  log "$name ($pid) ignored SIGTERM for 10 s; killing it"
  kill -KILL "$pid" 2>/dev/null || true
  for ((i = 0; i < 50; i++)); do alive "$pid" || return 0; sleep 0.1; done
  log "$name ($pid) does not die"
}

# Removes KUBE-* chains (and the rules jumping to them) from every table, IPv4 and IPv6.
remove_kube_chains() {
  local tool table rule chain
  for tool in iptables ip6tables; do
    command -v "$tool" >/dev/null || continue
    for table in filter nat mangle raw; do
      "$tool" -t "$table" -S >/dev/null 2>&1 || continue
      # Rules in other chains that jump into KUBE-* chains.
      while read -r rule; do
        eval "$tool -t $table ${rule/-A /-D }" 2>/dev/null || true
      done < <("$tool" -t "$table" -S | grep -E '^-A ' | grep -vE '^-A KUBE-' | grep -E -- '-j KUBE-' || true)
      for chain in $("$tool" -t "$table" -S | awk '/^-N KUBE-/ {print $2}'); do
        "$tool" -t "$table" -F "$chain" 2>/dev/null || true
      done
      for chain in $("$tool" -t "$table" -S | awk '/^-N KUBE-/ {print $2}'); do
        "$tool" -t "$table" -X "$chain" 2>/dev/null || true
      done
    done
  done
}

# Deletes the kubepods cgroup trees, leaves first, in every controller hierarchy.
remove_kubepods_cgroups() {
  local dir
  for dir in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods; do
    [[ -d $dir ]] || continue
    # Processes left in them (containers the shims no longer manage) are killed first.
    find "$dir" -name cgroup.procs -exec cat {} + 2>/dev/null | xargs -r kill -KILL 2>/dev/null || true
    # A killed process leaves its cgroup only once it has exited: try again for a while, or a
    # later start finds the tree and refuses to run beside "another Kubernetes".
    local i
    for ((i = 0; i < 50; i++)); do
      find "$dir" -depth -type d -exec rmdir {} + 2>/dev/null || true
      [[ -d $dir ]] || break
      sleep 0.2
    done
  done
}

# Everything the containers left on the host: shims, mounts, network namespaces, pod logs.
remove_containers() {
  local dir=$1 pid mnt ns
  [[ -d $dir/host ]] || return 0
  # The shims of our containerd (they survive it by design) and the containers they run.
  for pid in $(pgrep -f "containerd-shim.*-address $dir/containerd/containerd.sock" || true); do
    kill -KILL "$pid" 2>/dev/null || true
  done
  remove_kubepods_cgroups
  # Mounts under DIR (overlay rootfs, secret tmpfs, shm), deepest first.
  for mnt in $(awk -v d="$dir/" 'index($2, d) == 1 {print $2}' /proc/self/mounts | sort -r); do
    umount -l "$mnt" 2>/dev/null || true
  done
  for ns in /run/netns/cni-*; do
    [[ -e $ns ]] || continue
    umount "$ns" 2>/dev/null || true
    rm -f "$ns"
  done
  local path
  for path in "${host_paths[@]}"; do
    if [[ -f $dir/host/created${path//\//-} ]]; then rm -rf "$path"; fi
  done
  return 0
}

stop() {
  local dir=$1 name pid
  [[ -d $dir ]] || return 0
  # The watcher first, unless this is the watcher itself, so it does not stop things twice.
  pid=$(cat "$dir/watcher.pid" 2>/dev/null) || true
  if [[ -n $pid && -z ${BED_WATCHER:-} ]] && alive "$pid"; then terminate watcher "$pid"; fi
  rm -f "$dir/watcher.pid"
  for name in "${parts[@]}"; do
    pid=$(recorded_pid "$dir" "$name") && terminate "$name" "$pid"
    rm -f "$dir/$name.pid"
    if [[ $name == kubelet ]]; then
      # Containers go while containerd still runs, so it can tear their sandboxes down.
      remove_containers "$dir"
      pid=$(recorded_pid "$dir" containerd) && terminate containerd "$pid"
      rm -f "$dir/containerd.pid"
      remove_containers "$dir"
    fi
  done
  # The host changes, only if this bed made them (a bridge of someone else's stays).
  if [[ -d $dir/host ]]; then
    remove_kube_chains
    ip link delete "$bridge" 2>/dev/null || true
    local key value
    while read -r key value; do sysctl -qw "$key=$value" 2>/dev/null || true; done <"$dir/host/sysctl.saved"
    rm -rf "$dir/host"
  fi
  if [[ $(cat "$machine_owner" 2>/dev/null) == "$dir" ]]; then rm -f "$machine_owner"; fi
  rm -rf "$dir/users"
}

# True when the bed in DIR runs: every part alive and the API server ready.
running() {
  local dir=$1 name
  for name in "${parts[@]}" containerd; do recorded_pid "$dir" "$name" >/dev/null || return 1; done
  [[ -f $dir/kubeconfig ]] || return 1
  # Every part runs: give a busy API server 30 s to answer before calling the bed dead (a
  # restart would pull it from under the tests using it).
  local i
  for ((i = 0; i < 60; i++)); do
    "$bin/kubectl" --kubeconfig "$dir/kubeconfig" get --raw /readyz >/dev/null 2>&1 && return 0
    sleep 0.5
  done
  return 1
}

watch_pid='' rm_dir=0
case ${1:-} in
  --stop)
    [[ $# == 2 ]] || usage
    [[ -d $2 ]] || exit 0
    dir=$(cd "$2" && pwd)
    # Stops and starts take turns (a watcher already holds the lock when it gets here).
    if [[ -z ${BED_LOCK_HELD:-} ]]; then
      mkdir -p /run/lock
      exec 8>"$machine_lock"
      flock 8
    fi
    if [[ -n ${BED_WATCHER:-} ]]; then
      # A watcher stops only its own bed: a new bed may have replaced it in DIR meanwhile.
      [[ $(cat "$dir/watcher.pid" 2>/dev/null) == "$BED_WATCHER" ]] || exit 0
      remove_dir=0
      [[ -f $dir/users/.rm ]] && remove_dir=1
      stop "$dir"
      if ((remove_dir)) && [[ -f $dir/.made-by-up.sh ]]; then rm -rf "$dir"; fi
      exit 0
    fi
    stop "$dir"
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

[[ $(id -u) == 0 ]] || die "the bed needs root (bridge, iptables, mounts, cgroups): run it as root"
# --rm deletes DIR only if this script made it.
[[ -e $1 ]] || { mkdir -p "$1" && touch "$1/.made-by-up.sh"; }
mkdir -p /run/lock
dir=$(cd "$1" && pwd)

# One start at a time on this machine; a running bed in DIR is joined instead.
exec 8>"$machine_lock"
flock 8
add_user() {
  [[ -n $watch_pid ]] || return 0
  mkdir -p "$dir/users" && touch "$dir/users/$watch_pid"
  [[ $rm_dir == 1 ]] && touch "$dir/users/.rm"
  return 0
}
if running "$dir"; then
  add_user
  log "the bed in $dir already runs; joined"
  echo "export KUBECONFIG=$dir/kubeconfig"
  exit 0
fi
owner=$(cat "$machine_owner" 2>/dev/null) || true
if [[ -n $owner && $owner != "$dir" ]] && running "$owner"; then
  die "another bed runs on this machine, in $owner: stop it with $0 --stop $owner"
fi
# Leftovers of a bed that died (or of a half-started one) go first.
[[ -n $owner ]] && stop "$owner"
stop "$dir"
# A bed that starts (rather than joins) starts empty: an earlier bed's API objects, volumes and
# pod state in DIR would otherwise live on in every later run, its CronJobs still firing. The
# image store stays (images.sh imports the images again on every start).
rm -rf "$dir/etcd" "$dir/volumes" "$dir/kubelet" "$dir/cni" \
  || die "cannot remove the earlier bed's state in $dir (a mount left under it?)"

# Preconditions, each with one line that says what to do.
for b in "$bin"/{kube-apiserver,kube-controller-manager,kube-scheduler,kubelet,kube-proxy,kubectl} "$etcd" \
  "$containerd_bin"/{containerd,containerd-shim-runc-v2,ctr}; do
  [[ -x $b ]] || die "no $b: build it with $repo/e2e/cluster/build.sh (once; cached)"
done
# containerd finds its shim on PATH; ctr is used by images.sh.
export PATH=$containerd_bin:$PATH
for tool in runc umoci dnsmasq iptables catatonit busybox openssl; do
  command -v "$tool" >/dev/null || die "$tool is missing: run $repo/e2e/install-deps.sh"
done
[[ -x /usr/lib/cni/bridge && -x /usr/lib/cni/host-local ]] || die "CNI plugins missing: run $repo/e2e/install-deps.sh"
# --stop removes every KUBE-* chain, kubepods cgroup and CNI netns: start only where none
# exists, so that all of them are this bed's.
if iptables -t nat -S 2>/dev/null | grep -q '^-N KUBE-' || iptables -t filter -S 2>/dev/null | grep -q '^-N KUBE-'; then
  die "KUBE-* iptables chains exist: another Kubernetes runs on this machine (stop it, or remove them if they are a dead bed's)"
fi
if compgen -G '/sys/fs/cgroup/*/kubepods' >/dev/null || compgen -G '/run/netns/cni-*' >/dev/null; then
  die "kubepods cgroups or CNI network namespaces exist: another Kubernetes or container runtime runs on this machine; stop it first"
fi
if ip link show "$bridge" >/dev/null 2>&1; then
  die "a bridge $bridge exists that this bed did not make (addresses: $(ip -o -4 addr show dev "$bridge" | awk '{print $4}' | paste -sd, -)); delete it with: ip link delete $bridge"
fi
if ip -4 -o addr show | grep -v " $bridge " | grep -q " ${gateway%.*}\."; then
  die "10.88.0.0/16 is already used on this machine ($(ip -4 -o addr show | grep " ${gateway%.*}\." | awk '{print $2, $4}' | head -1)); the bed needs it for pods"
fi
for port in 6443 53; do
  if [[ -n $(ss -Hltnu "( sport = :$port )" 2>/dev/null | grep -E "(0\.0\.0\.0|\*|\[::\]|$gateway):$port " || true) ]]; then
    die "port $port is taken on all addresses: $(ss -Hltnup "( sport = :$port )" | head -1 | awk '{print $NF}'); stop that program or the bed cannot serve on $gateway:$port"
  fi
done
agent=${BED_AGENT:-$binaries/bed-agent}
if [[ ! -x $agent ]]; then
  log "building the bed agent (cargo build -p testbed --bin bed-agent)"
  (cd "$repo" && cargo build -q --locked -p testbed --bin bed-agent) >&2
  agent=${CARGO_TARGET_DIR:-$repo/target}/debug/bed-agent
fi

echo "$dir" >"$machine_owner"
ready=
trap 'if [[ -z $ready ]]; then log "start failed; stopping what started"; stop "$dir" || true; fi' EXIT
started=$SECONDS
mkdir -p "$dir/logs"

fail() {
  local name=$1
  shift
  log "$*; last lines of $dir/logs/$name.log:"
  tail -n 30 "$dir/logs/$name.log" >&2 || true
  exit 1
}

# Starts part NAME (a program with arguments) in the background, in its own session.
start() {
  local name=$1
  shift
  # Not with the machine lock's fd 8: the lock must end with this script.
  setsid "$@" </dev/null >"$dir/logs/$name.log" 2>&1 8>&- &
  echo $! >"$dir/$name.pid"
}

# Waits until COMMAND succeeds while part NAME runs.
wait_for() {
  local name=$1 what=$2 t0=$SECONDS pid
  shift 2
  pid=$(cat "$dir/$name.pid")
  while ((SECONDS - t0 < timeout)); do
    alive "$pid" || fail "$name" "$name exited before $what"
    "$@" >/dev/null 2>&1 && return 0
    sleep 0.25
  done
  fail "$name" "no $what after $timeout s"
}

# 1. Host network: the bridge, sysctls. What is changed on the host is recorded in DIR/host
#    first, so that --stop undoes exactly that: old sysctl values, host paths the kubelet creates.
mkdir -p "$dir/host"
: >"$dir/host/sysctl.saved"
for key in "${sysctls[@]}"; do
  value=$(sysctl -n "$key" 2>/dev/null) && echo "$key $value" >>"$dir/host/sysctl.saved"
done
for path in "${host_paths[@]}"; do
  [[ -e $path ]] || touch "$dir/host/created${path//\//-}"
done
modprobe br_netfilter 2>/dev/null || true
sysctl -qw net.ipv4.ip_forward=1 net.bridge.bridge-nf-call-iptables=1 \
  || die "cannot set net.ipv4.ip_forward / bridge-nf-call-iptables (br_netfilter missing?)"
ip link add "$bridge" type bridge
ip addr add "$gateway/16" dev "$bridge"
ip link set "$bridge" up

# 2. Certificates and credentials. One CA; the API server's serving certificate; the client
#    certificate the API server shows the kubelet; tokens for everyone else.
pki=$dir/pki
mkdir -p "$pki"
(
  cd "$pki"
  umask 077
  [[ -f ca.crt ]] || openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj /CN=testbed-ca \
    -keyout ca.key -out ca.crt 2>/dev/null
  sign() { # NAME SUBJECT EXTENSIONS
    [[ -f $1.crt ]] && return
    openssl req -newkey rsa:2048 -nodes -subj "$2" -keyout "$1.key" -out "$1.csr" 2>/dev/null
    printf '%s\n' "$3" >"$1.ext"
    openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
      -extfile "$1.ext" -out "$1.crt" 2>/dev/null
  }
  sign apiserver /CN=kube-apiserver "subjectAltName=IP:$gateway,IP:10.96.0.1,IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local
extendedKeyUsage=serverAuth"
  sign kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" "extendedKeyUsage=clientAuth"
  sign kubelet "/CN=$node" "subjectAltName=IP:$gateway,DNS:$node
extendedKeyUsage=serverAuth"
  [[ -f sa.key ]] || { openssl genrsa -out sa.key 2048 2>/dev/null; openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null; }
  if [[ ! -f ../tokens.csv ]]; then
    t() { openssl rand -hex 24; }
    {
      echo "$(t),admin,admin,\"system:masters\""
      echo "$(t),system:kube-controller-manager,kcm"
      echo "$(t),system:kube-scheduler,scheduler"
      echo "$(t),system:node:$node,kubelet,\"system:nodes\""
      echo "$(t),system:kube-proxy,kube-proxy"
    } >../tokens.csv
  fi
)
token() { awk -F, -v u="$1" '$2 == u {print $1}' "$dir/tokens.csv"; }
server=https://$gateway:$api_port
kubeconfig() { # FILE USER
  (
    umask 077
    cat >"$1.tmp" <<KUBECONFIG
apiVersion: v1
kind: Config
clusters:
- name: testbed
  cluster:
    server: $server
    certificate-authority-data: $(base64 -w0 "$pki/ca.crt")
users:
- name: $2
  user:
    token: $(token "$2")
contexts:
- name: testbed
  context:
    cluster: testbed
    user: $2
    namespace: default
current-context: testbed
KUBECONFIG
    mv "$1.tmp" "$1"
  )
}
for user in system:kube-controller-manager system:kube-scheduler system:node:$node system:kube-proxy; do
  kubeconfig "$dir/${user##*:}.kubeconfig" "$user"
done

# The watcher before anything runs, so even a failed start is cleaned up if the caller dies.
if [[ -n $watch_pid ]]; then
  add_user
  # shellcheck disable=SC2016 # expanded by the inner bash
  setsid bash -c 'dir=$1 up=$2 lock=$3
    live() {
      local f p live=1
      for f in "$dir"/users/*; do
        p=${f##*/}
        [[ $p =~ ^[0-9]+$ ]] || continue
        if kill -0 "$p" 2>/dev/null; then live=0; else rm -f "$f"; fi
      done
      return $live
    }
    # Stops the bed once no user is alive any more, deciding under the machine lock so that
    # a user joining meanwhile (which happens under the lock) keeps it running.
    while :; do
      sleep 2
      live && continue
      exec 9>"$lock"
      flock 9
      if live; then flock -u 9; continue; fi
      BED_WATCHER=$$ BED_LOCK_HELD=1 exec "$up" --stop "$dir"
    done' watcher "$dir" "$here/up.sh" "$machine_lock" </dev/null >>"$dir/logs/watcher.log" 2>&1 8>&- &
  echo $! >"$dir/watcher.pid"
fi

# 3. Control plane: etcd, API server, controller manager, scheduler.
etcd_port='' etcd_peer_port='' kcm_port='' sched_port='' kubelet_port='' kubelet_healthz='' proxy_healthz='' proxy_metrics=''
for v in etcd_port etcd_peer_port kcm_port sched_port kubelet_port kubelet_healthz proxy_healthz proxy_metrics; do free_port "$v"; done
log "etcd on 127.0.0.1:$etcd_port"
start etcd "$etcd" --name testbed --data-dir "$dir/etcd" \
  --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
  --listen-peer-urls "http://127.0.0.1:$etcd_peer_port" --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer_port" \
  --initial-cluster "testbed=http://127.0.0.1:$etcd_peer_port" --initial-cluster-token testbed
wait_for etcd "etcd health" curl -sf "http://127.0.0.1:$etcd_port/health"

log "kube-apiserver on $server"
start kube-apiserver "$bin/kube-apiserver" --etcd-servers "http://127.0.0.1:$etcd_port" \
  --bind-address "$gateway" --advertise-address "$gateway" --secure-port "$api_port" \
  --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" \
  --client-ca-file "$pki/ca.crt" --token-auth-file "$dir/tokens.csv" \
  --kubelet-client-certificate "$pki/kubelet-client.crt" --kubelet-client-key "$pki/kubelet-client.key" \
  --kubelet-certificate-authority "$pki/ca.crt" --kubelet-preferred-address-types InternalIP \
  --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
  --service-cluster-ip-range "$service_cidr" --allow-privileged=true \
  --service-account-key-file "$pki/sa.pub" --service-account-signing-key-file "$pki/sa.key" \
  --service-account-issuer https://kubernetes.default.svc.cluster.local \
  --endpoint-reconciler-type lease --profiling=false
wait_for kube-apiserver "API server readiness" curl -sf --cacert "$pki/ca.crt" \
  -H "Authorization: Bearer $(token admin)" "$server/readyz"
kubeconfig "$dir/kubeconfig" admin
kubectl=("$bin/kubectl" --kubeconfig "$dir/kubeconfig")

log "kube-controller-manager, kube-scheduler"
start kube-controller-manager "$bin/kube-controller-manager" --kubeconfig "$dir/kube-controller-manager.kubeconfig" \
  --authentication-kubeconfig "$dir/kube-controller-manager.kubeconfig" \
  --authorization-kubeconfig "$dir/kube-controller-manager.kubeconfig" \
  --leader-elect=false --bind-address 127.0.0.1 --secure-port "$kcm_port" --cert-dir "$dir/kcm-certs" \
  --use-service-account-credentials --service-account-private-key-file "$pki/sa.key" \
  --root-ca-file "$pki/ca.crt" --cluster-cidr "$pod_cidr" --profiling=false
start kube-scheduler "$bin/kube-scheduler" --kubeconfig "$dir/kube-scheduler.kubeconfig" \
  --authentication-kubeconfig "$dir/kube-scheduler.kubeconfig" \
  --authorization-kubeconfig "$dir/kube-scheduler.kubeconfig" \
  --leader-elect=false --bind-address 127.0.0.1 --secure-port "$sched_port" --cert-dir "$dir/scheduler-certs" \
  --profiling=false

# 4. Cluster DNS: dnsmasq answers for cluster.local only (never forwards); the agent writes the
#    records. It also provisions directory volumes for the default StorageClass.
mkdir -p "$dir/dns" "$dir/volumes"
: >"$dir/dns/cluster.hosts"
start dnsmasq dnsmasq --keep-in-foreground --no-resolv --no-hosts --no-poll --bind-interfaces \
  --listen-address "$gateway" --port 53 --local=/cluster.local/ --domain-needed \
  --hostsdir "$dir/dns" --pid-file= --user=root --log-facility=-
start bed-agent "$agent" --kubeconfig "$dir/kubeconfig" --dns-hosts "$dir/dns/cluster.hosts" \
  --volumes "$dir/volumes" --node "$node"

# 5. containerd (own root, state, socket and runc root under DIR) and the images.
ctrd=$dir/containerd
mkdir -p "$ctrd" "$dir/cni/net.d"
# containerd 2's configuration (schema version 3: the CRI plugin is split into image and runtime
# sections; 1.x's io.containerd.grpc.v1.cri section would be ignored).
cat >"$ctrd/config.toml" <<TOML
version = 3
root = "$ctrd/root"
state = "$ctrd/state"
[grpc]
  address = "$ctrd/containerd.sock"
[ttrpc]
  address = "$ctrd/containerd.sock.ttrpc"
[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "localhost/pause:3.2"
[plugins."io.containerd.cri.v1.runtime"]
  # runc cannot set oom_score_adj -998 without CAP_SYS_RESOURCE, which this machine lacks.
  restrict_oom_score_adj = true
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$ctrd/runc"
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = "$dir/cni/net.d"
TOML
# The CNI bridge: a gateway for the service range only, no default route, no masquerade.
cat >"$dir/cni/net.d/10-testbed.conflist" <<JSON
{
  "cniVersion": "0.4.0",
  "name": "testbed",
  "plugins": [{
    "type": "bridge", "bridge": "$bridge", "isGateway": true, "isDefaultGateway": false,
    "ipMasq": false, "hairpinMode": true,
    "ipam": {
      "type": "host-local", "dataDir": "$dir/cni/ipam",
      "ranges": [[{"subnet": "$pod_cidr", "rangeStart": "10.88.1.1", "gateway": "$gateway"}]],
      "routes": [{"dst": "$service_cidr"}]
    }
  }, {"type": "loopback"}]
}
JSON
log "containerd"
start containerd containerd --config "$ctrd/config.toml"
wait_for containerd "containerd socket" ctr --address "$ctrd/containerd.sock" version
"$here/images.sh" "$ctrd/containerd.sock" "$dir/images" "$binaries" 2>"$dir/logs/images.log" \
  || { tail -n 20 "$dir/logs/images.log" >&2; die "building the images failed (log: $dir/logs/images.log)"; }

# 6. kubelet and kube-proxy.
: >"$dir/resolv.conf"
cat >"$dir/kubelet.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $gateway
port: $kubelet_port
healthzBindAddress: 127.0.0.1
healthzPort: $kubelet_healthz
readOnlyPort: 0
tlsCertFile: $pki/kubelet.crt
tlsPrivateKeyFile: $pki/kubelet.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $pki/ca.crt}
authorization: {mode: Webhook}
cgroupDriver: cgroupfs
failSwapOn: false
makeIPTablesUtilChains: false
clusterDNS: [$gateway]
clusterDomain: cluster.local
resolvConf: $dir/resolv.conf
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {nodefs.available: "1%", imagefs.available: "1%", memory.available: "100Mi", nodefs.inodesFree: "1%"}
volumePluginDir: $dir/kubelet-plugins
serializeImagePulls: false
containerRuntimeEndpoint: unix://$ctrd/containerd.sock
# This machine mounts cgroup v1 hierarchies (hybrid, an empty cgroup2 at /sys/fs/cgroup/unified);
# the kubelet refuses to start on cgroup v1 unless told to accept it.
failCgroupV1: false
YAML
log "kubelet (node $node at $gateway)"
start kubelet "$bin/kubelet" --config "$dir/kubelet.yaml" --kubeconfig "$dir/$node.kubeconfig" \
  --root-dir "$dir/kubelet" --cert-dir "$dir/kubelet-certs" \
  --hostname-override "$node" --node-ip "$gateway"
cat >"$dir/kube-proxy.yaml" <<YAML
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $dir/kube-proxy.kubeconfig}
mode: iptables
clusterCIDR: $pod_cidr
hostnameOverride: $node
bindAddress: $gateway
healthzBindAddress: 127.0.0.1:$proxy_healthz
metricsBindAddress: 127.0.0.1:$proxy_metrics
# Leave the machine's conntrack table size alone.
conntrack: {maxPerCore: 0}
YAML
log "kube-proxy"
start kube-proxy "$bin/kube-proxy" --config "$dir/kube-proxy.yaml"

node_ready() {
  [[ $("${kubectl[@]}" get node "$node" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null) == True ]]
}
wait_for kubelet "node Ready" node_ready
wait_for kube-proxy "kube-proxy health" curl -sf "http://127.0.0.1:$proxy_healthz/healthz"
wait_for bed-agent "the default StorageClass" "${kubectl[@]}" get storageclass testbed-local

ready=1
log "ready in $((SECONDS - started)) s (logs in $dir/logs; stop with $0 --stop $dir)"
echo "export KUBECONFIG=$dir/kubeconfig"
