#!/usr/bin/env bash
# Starts a real Kubernetes (1.37 by default, 1.35 with KUBE_VERSION=1.35; versions.sh) whose
# kubelets run pods, on this machine only, every part built from its Go module by build.sh:
# etcd, kube-apiserver, kube-controller-manager, kube-scheduler, and per node containerd 2 + runc,
# kubelet and kube-proxy (iptables); a bridge 10.88.0.1/16 with no default route and no
# masquerade for pods (no pod traffic leaves the machine), dnsmasq as cluster DNS and the bed agent
# (DNS records for Services and headless pods, the StorageClasses). Images come from images.sh.
# One node by default (the host itself); `--nodes N` starts N nodes, each in its own network
# namespace and zone (node.sh says how they are laid out). See
# shared/reference/test-cluster-with-kubelet.md for why each setting is what it is.
#
#   up.sh [--nodes N] [--watch-pid PID [--rm]] DIR
#         Starts the bed in DIR (or, if it already runs there with N nodes, just adds PID to its
#         users) and prints `export KUBECONFIG=DIR/kubeconfig`. With --watch-pid, the bed stops
#         once every process that started or joined it that way is gone (and with --rm, DIR is
#         deleted). A bed that starts has no objects, volumes or pods from an earlier bed in DIR.
#   up.sh --stop DIR
#         Stops everything and leaves nothing behind: processes, containers, mounts, network
#         namespaces, the bridge, routes, KUBE-* iptables chains, the pods' cgroups; changed
#         sysctls are restored. Also with nodes down or cut off.
#   up.sh --node-down DIR NODE    NODE powered off: network cut, its kubelet, kube-proxy,
#                                 containerd and containers killed at once (files and volumes stay)
#   up.sh --node-up DIR NODE      powered on again on the same files
#   up.sh --partition DIR NODE    NODE's network cut while everything on it keeps running
#   up.sh --heal DIR NODE         its network back
#         Faults need a bed of two nodes or more. The node controller's timings are Kubernetes'
#         defaults (NotReady about 50 s after a node stops reporting, NoExecute eviction after
#         300 s more).
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

bridge=ebsbed0 gateway=10.88.0.1 pod_cidr=10.88.0.0/16 service_cidr=10.96.0.0/24
api_port=6443
# The control plane's parts, in stop order; the nodes stop between the bed agent and the rest.
parts=(bed-agent kube-scheduler kube-controller-manager kube-apiserver dnsmasq etcd)
# What the kubelet and kube-proxy may change; recorded before start, restored on stop.
sysctls=(net.ipv4.ip_forward net.bridge.bridge-nf-call-iptables net.bridge.bridge-nf-call-ip6tables
  net.ipv4.conf.all.route_localnet vm.overcommit_memory vm.panic_on_oom kernel.panic
  kernel.panic_on_oops kernel.keys.root_maxkeys kernel.keys.root_maxbytes)

# Fixed host paths the kubelet, containerd (shim sockets) and CNI (netns, the CNI library's
# result cache) create; removed on stop when this bed created them.
host_paths=(/var/log/pods /var/log/containers /var/lib/kubelet /run/containerd /run/netns /var/lib/cni)

log() { echo "up.sh: $*" >&2; }
die() { log "$*"; exit 1; }
usage() {
  echo "usage: $0 [--nodes N] [--watch-pid PID [--rm]] DIR | --stop DIR" >&2
  echo "       $0 --node-down|--node-up|--partition|--heal DIR NODE" >&2
  exit 2
}

# alive, recorded_pid, free_port
# shellcheck source=../lib/processes.sh
source "$here/../lib/processes.sh"
# shellcheck source=node.sh
source "$here/node.sh"

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

# What the containers left on the host beside the nodes' own: CNI network namespaces (every
# one on the machine is this bed's: it starts only where none exists) and the fixed host paths
# the kubelets and containerd created.
remove_host_leftovers() {
  local dir=$1 ns path
  [[ -d $dir/host ]] || return 0
  for ns in /run/netns/cni-*; do
    [[ -e $ns ]] || continue
    umount "$ns" 2>/dev/null || true
    rm -f "$ns"
  done
  # The CNI library caches each attachment's result under the network's name (ours, and
  # containerd's loopback); a pod killed without a network teardown leaves its entry.
  rm -f /var/lib/cni/results/testbed-* /var/lib/cni/results/cni-loopback-*
  # `ip netns add` mounts /run/netns on itself (to share it) when it is not a mount point yet.
  if [[ -f $dir/host/netns-not-mounted ]]; then
    while mountpoint -q /run/netns 2>/dev/null; do umount /run/netns 2>/dev/null || break; done
  fi
  for path in "${host_paths[@]}"; do
    [[ -f $dir/host/created${path//\//-} ]] || continue
    while mountpoint -q "$path" 2>/dev/null; do umount "$path" 2>/dev/null || break; done
    rm -rf "$path"
  done
  return 0
}

# Removes DIR, which this script made: its marker last, so that a removal that fails half-way
# (a mount still busy under it) leaves a DIR the next stop still knows it may remove, instead of
# a nameless leftover that grows with every run's images. What could not be removed is said.
remove_bed_dir() {
  local dir=$1 entry failed=0
  for entry in "$dir"/* "$dir"/.[!.]*; do
    [[ -e $entry && $entry != "$dir/.made-by-up.sh" ]] || continue
    rm -rf "$entry" 2>/dev/null || failed=1
  done
  if ((failed)); then
    log "could not remove all of $dir (still mounted: $(mount | grep -c " $dir/")); kept for the next stop"
    return 0
  fi
  rm -f "$dir/.made-by-up.sh"
  rmdir "$dir" 2>/dev/null || log "$dir is not empty after its removal: kept"
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
    if [[ $name == bed-agent && -d $dir/host ]]; then
      local node
      for node in $(bed_nodes "$dir"); do stop_node "$node"; done
      remove_host_leftovers "$dir"
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

# True when the bed in DIR runs: every part alive (on every node not taken down) and the API
# server ready.
running() {
  local dir=$1 name node
  for name in "${parts[@]}"; do recorded_pid "$dir" "$name" >/dev/null || return 1; done
  for node in $(bed_nodes "$dir"); do
    [[ $(node_state "$node") == down ]] && continue
    for name in containerd kubelet kube-proxy; do
      recorded_pid "$dir" "$(node_part "$node" "$name")" >/dev/null || return 1
    done
  done
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

# The users that started or joined the bed in DIR with --watch-pid and still run; fails when
# there were such users and none is left (a bed started without --watch-pid counts as used).
has_live_users() {
  local f p
  [[ -d $1/users ]] || return 0
  for f in "$1"/users/*; do
    p=${f##*/}
    [[ $p =~ ^[0-9]+$ ]] && kill -0 "$p" 2>/dev/null && return 0
  done
  return 1
}

watch_pid='' rm_dir=0 nodes=1
case ${1:-} in
  --node-down | --node-up | --partition | --heal)
    [[ $# == 3 && -d $2 ]] || usage
    dir=$(cd "$2" && pwd) node=$3
    [[ $(bed_nodes "$dir") == testbed ]] && die "the bed in $dir has one node: faults need --nodes 2 or more"
    bed_nodes "$dir" | grep -qx -- "$node" || die "the bed in $dir has no node $node (it has: $(bed_nodes "$dir" | paste -sd' ' -))"
    mkdir -p /run/lock
    exec 8>"$machine_lock"
    flock 8
    state=$(node_state "$node")
    export PATH=$containerd_bin:$PATH
    case $1 in
      --node-down) [[ $state == up ]] || die "$node is $state, not up"; node_down "$node" ;;
      --node-up) [[ $state == down ]] || die "$node is $state, not down"; node_up "$node" ;;
      --partition) [[ $state == up ]] || die "$node is $state, not up"; partition_node "$node" ;;
      --heal) [[ $state == partitioned ]] || die "$node is $state, not partitioned"; heal_node "$node" ;;
    esac
    exit 0
    ;;
esac
if [[ ${1:-} == --nodes ]]; then
  [[ ${2:-} =~ ^[1-6]$ ]] || die "--nodes takes 1 to 6"
  nodes=$2
  shift 2
fi
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
    # A watcher stops only its own bed: a new bed may have replaced it in DIR meanwhile.
    if [[ -n ${BED_WATCHER:-} && $(cat "$dir/watcher.pid" 2>/dev/null) != "$BED_WATCHER" ]]; then
      exit 0
    fi
    # A DIR this script made for users that asked for --rm goes with the bed, whoever stops it
    # (its watcher, or e2e/test.sh between its runs).
    remove_dir=0
    [[ -f $dir/users/.rm ]] && remove_dir=1
    stop "$dir"
    if ((remove_dir)) && [[ -f $dir/.made-by-up.sh ]]; then remove_bed_dir "$dir"; fi
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
# e2e/test.sh runs the tests that need no bed beside the bed's, with this set: one of them
# starting or joining a bed is a test in the wrong lane.
[[ -z ${BED_REFUSED:-} ]] || die "refused to start or join a bed (BED_REFUSED): $BED_REFUSED"

[[ $(id -u) == 0 ]] || die "the bed needs root (bridge, iptables, mounts, cgroups): run it as root"

# One start at a time on this machine; a running bed in DIR is joined instead.
mkdir -p /run/lock
exec 8>"$machine_lock"
flock 8
# --rm deletes DIR only if this script made it. Looked at under the lock: a stop that holds it
# (the watcher of an earlier bed in DIR) may be removing DIR right now, marker and all.
[[ -e $1 ]] || { mkdir -p "$1" && touch "$1/.made-by-up.sh"; }
dir=$(cd "$1" && pwd)
add_user() {
  [[ -n $watch_pid ]] || return 0
  mkdir -p "$dir/users" && touch "$dir/users/$watch_pid"
  [[ $rm_dir == 1 ]] && touch "$dir/users/.rm"
  return 0
}
if [[ $nodes == 1 ]]; then wanted_nodes=testbed; else wanted_nodes=$(printf '%s\n' "${multi_node_names[@]:0:$nodes}"); fi
if running "$dir" && [[ $(bed_nodes "$dir") != "$wanted_nodes" ]]; then
  has_live_users "$dir" && die "the bed in $dir runs with other nodes ($(bed_nodes "$dir" | paste -sd' ' -)) for users that still run; stop it first: $0 --stop $dir"
  log "the bed in $dir runs with other nodes and no user is left: stopping it"
  stop "$dir"
fi
if running "$dir"; then
  add_user
  log "the bed in $dir already runs; joined"
  echo "export KUBECONFIG=$dir/kubeconfig"
  exit 0
fi
owner=$(cat "$machine_owner" 2>/dev/null) || true
if [[ -n $owner && $owner != "$dir" ]] && running "$owner"; then
  has_live_users "$owner" && die "another bed runs on this machine, in $owner: stop it with $0 --stop $owner"
  # Its users are gone and its watcher has not stopped it yet: it is stopped here.
  log "the bed in $owner has no user left: stopping it"
fi
# Leftovers of a bed that died (or of a half-started one) go first.
[[ -n $owner ]] && stop "$owner"
stop "$dir"
# A bed that starts (rather than joins) starts empty: an earlier bed's API objects, volumes and
# pod state in DIR would otherwise live on in every later run, its CronJobs still firing. The
# image store stays (images.sh imports the images again on every start).
rm -rf "$dir/etcd" "$dir/volumes" "$dir/kubelet" "$dir/cni" "$dir"/nodes/*/{kubelet,cni,pod-logs} \
  || die "cannot remove the earlier bed's state in $dir (a mount left under it?)"

# Preconditions, each with one line that says what to do.
for b in "$bin"/{kube-apiserver,kube-controller-manager,kube-scheduler,kubelet,kube-proxy,kubectl} "$etcd" \
  "$containerd_bin"/{containerd,containerd-shim-runc-v2,ctr}; do
  [[ -x $b ]] || die "no $b: build it with $repo/e2e/cluster/build.sh (once; cached)"
done
# containerd finds its shim on PATH; ctr is used by images.sh.
export PATH=$containerd_bin:$PATH
for tool in runc umoci dnsmasq iptables catatonit busybox openssl nsenter; do
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
if compgen -G '/sys/fs/cgroup/*/ebsbed-*' >/dev/null || compgen -G '/run/netns/ebsbed-*' >/dev/null; then
  die "ebsbed-* cgroups or network namespaces exist, left by a bed that was not stopped: remove them (ip netns delete; rmdir) or stop that bed"
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
mountpoint -q /run/netns 2>/dev/null || touch "$dir/host/netns-not-mounted"
modprobe br_netfilter 2>/dev/null || true
sysctl -qw net.ipv4.ip_forward=1 net.bridge.bridge-nf-call-iptables=1 \
  || die "cannot set net.ipv4.ip_forward / bridge-nf-call-iptables (br_netfilter missing?)"
ip link add "$bridge" type bridge
ip addr add "$gateway/16" dev "$bridge"
ip link set "$bridge" up
echo "$wanted_nodes" >"$dir/nodes.list"
node_count=$(wc -l <"$dir/nodes.list")
if ((nodes > 1)); then
  for node in $wanted_nodes; do
    make_node_network "$node" "$node_count"
    make_node_cgroup "$(node_cgroup "$node")"
  done
fi

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
  for node in $wanted_nodes; do
    sign "kubelet-$node" "/CN=$node" "subjectAltName=IP:$(node_ip "$node"),DNS:$node
extendedKeyUsage=serverAuth"
  done
  [[ -f sa.key ]] || { openssl genrsa -out sa.key 2048 2>/dev/null; openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null; }
  # One token per user (uid unique), kept across starts in DIR; a node new to DIR gets one.
  t() { openssl rand -hex 24; }
  touch ../tokens.csv
  add_token() { # USER UID [GROUP]
    grep -q "^[^,]*,$1," ../tokens.csv || echo "$(t),$1,$2${3:+,\"$3\"}" >>../tokens.csv
  }
  add_token admin admin system:masters
  add_token system:kube-controller-manager kcm
  add_token system:kube-scheduler scheduler
  add_token system:kube-proxy kube-proxy
  for node in $wanted_nodes; do add_token "system:node:$node" "kubelet-$node" system:nodes; done
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
for user in system:kube-controller-manager system:kube-scheduler $(printf 'system:node:%s ' $wanted_nodes) system:kube-proxy; do
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
etcd_port='' etcd_peer_port='' kcm_port='' sched_port=''
for v in etcd_port etcd_peer_port kcm_port sched_port; do free_port "$v"; done
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
  --volumes "$dir/volumes" --nodes "$(paste -sd, "$dir/nodes.list")"

# 5. The nodes: containerd (own root, state, socket and runc root), the images in each, then
#    kubelet and kube-proxy (node.sh).
: >"$dir/resolv.conf"
sockets=()
for node in $wanted_nodes; do
  write_node_config "$node" "$node_count"
  start_node_containerd "$node"
  sockets+=("$(node_dir "$dir" "$node")/containerd/containerd.sock")
done
images_started=$SECONDS
"$here/images.sh" "$(IFS=,; echo "${sockets[*]}")" "$dir/images" "$binaries" 2>"$dir/logs/images.log" \
  || { tail -n 20 "$dir/logs/images.log" >&2; die "building the images failed (log: $dir/logs/images.log)"; }
log "images in every node in $((SECONDS - images_started)) s"
for node in $wanted_nodes; do start_node_kubelet "$node"; done
for node in $wanted_nodes; do wait_node_ready "$node"; done
wait_for bed-agent "the default StorageClass" "${kubectl[@]}" get storageclass testbed-local

ready=1
log "ready in $((SECONDS - started)) s (logs in $dir/logs; stop with $0 --stop $dir)"
echo "export KUBECONFIG=$dir/kubeconfig"
