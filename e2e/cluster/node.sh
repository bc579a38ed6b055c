# The kubelet bed's nodes (sourced by up.sh, not run): each node's network, containerd, kubelet
# and kube-proxy, their configuration, how they start and stop, and the node faults.
#
# Two layouts:
# - One node (the default bed), named `testbed`: the node is the host itself. Its address is the
#   bridge's ($gateway), its pods sit on the bridge in 10.88.0.0/16 (from 10.88.1.1), its pod
#   cgroups under /kubepods, its files directly in DIR. The bed as it always was.
# - N nodes (`--nodes N`, 2 to 6), named node-a, node-b, ...: node i (1-based) is the network
#   namespace ebsbed-<node>, joined to the bridge by a veth (host end ebsv-<letter>), at address
#   10.88.0.(10+i)/24. Its pods are on its own bridge (cni0 inside the namespace) in 10.88.i.0/24,
#   routed straight to the other nodes' pod ranges (10.88.j.0/24 via node j) and to Services by
#   its own kube-proxy; no default route, so nothing leaves the machine. The host routes each pod
#   range to its node. Pod cgroups under /ebsbed-<node>, files in DIR/nodes/<node>, pod logs
#   under the node's directory (the kubelets would delete each other's otherwise).
#   Node i is in zone zone-a, zone-b or zone-c (i cycling), label topology.kubernetes.io/zone.
#
# Needs from up.sh: dir, gateway, bridge, pod_cidr, service_cidr, pki, bin, the functions start,
# wait_for, terminate, log, die, and processes.sh's.

multi_node_names=(node-a node-b node-c node-d node-e node-f)
zones=(zone-a zone-b zone-c)

# The nodes of the bed in DIR, one per line (recorded at start; a bed from before the record
# has the one node).
bed_nodes() {
  if [[ -f $1/nodes.list ]]; then cat "$1/nodes.list"; else echo testbed; fi
}

# 0 for the single node, else the node's 1-based position in multi_node_names.
node_index() {
  local i
  [[ $1 == testbed ]] && { echo 0; return; }
  for i in "${!multi_node_names[@]}"; do
    [[ ${multi_node_names[$i]} == "$1" ]] && { echo $((i + 1)); return; }
  done
  die "no node $1 (nodes: node-a, node-b, ...)"
}

# Where the node's files are, and the prefix of its parts' names for start/recorded_pid (its pid
# files and logs): DIR itself for the single node, DIR/nodes/<node> otherwise. A part's name
# must appear in its command line (recorded_pid checks that pids were not reused): each part's
# command line names its own file under that directory.
node_dir() { [[ $2 == testbed ]] && echo "$1" || echo "$1/nodes/$2"; }
node_part() { [[ $1 == testbed ]] && echo "$2" || echo "nodes/$1/$2"; }
node_ip() { local i; i=$(node_index "$1"); ((i == 0)) && echo "$gateway" || echo "10.88.0.$((10 + i))"; }
node_netns() { [[ $1 == testbed ]] || echo "ebsbed-$1"; }
node_veth() { echo "ebsv-${1#node-}"; }
node_zone() { local i; i=$(node_index "$1"); ((i == 0)) && echo zone-a || echo "${zones[$(((i - 1) % 3))]}"; }
node_cgroup() { [[ $1 == testbed ]] && echo kubepods || echo "ebsbed-$1"; }

# Runs a command in the node's network namespace (only that: mounts and cgroups stay the
# host's, which `ip netns exec` would not keep).
in_node() {
  local ns
  ns=$(node_netns "$1")
  shift
  if [[ -n $ns ]]; then nsenter --net="/run/netns/$ns" "$@"; else "$@"; fi
}

# Sets array variable $2 to the prefix that runs a program in node $1's network namespace
# (nsenter execs it, so the recorded pid is the program's), empty for the single node.
in_node_prefix() {
  local ns
  ns=$(node_netns "$1")
  if [[ -n $ns ]]; then eval "$2=(nsenter --net=/run/netns/$ns)"; else eval "$2=()"; fi
}

# The node's network namespace, its veth on the bridge, its routes and the host's route to its
# pods. Multi-node layout only.
make_node_network() {
  local node=$1 count=$2 i ns veth ip j
  i=$(node_index "$node") ns=$(node_netns "$node") veth=$(node_veth "$node") ip=$(node_ip "$node")
  ip netns add "$ns"
  ip link add "$veth" type veth peer name eth0 netns "$ns"
  ip link set "$veth" master "$bridge" up
  in_node "$node" ip link set lo up
  in_node "$node" ip addr add "$ip/24" dev eth0
  in_node "$node" ip link set eth0 up
  for ((j = 1; j <= count; j++)); do
    ((j == i)) || in_node "$node" ip route add "10.88.$j.0/24" via "10.88.0.$((10 + j))"
  done
  in_node "$node" ip route add "$service_cidr" via "$gateway"
  # Per network namespace: forwarding between the pods' bridge and eth0, and bridged pod
  # traffic through kube-proxy's iptables rules (Services, hairpin).
  in_node "$node" sysctl -qw net.ipv4.ip_forward=1 net.bridge.bridge-nf-call-iptables=1
  ip route add "10.88.$i.0/24" via "$ip" dev "$bridge"
}

# The node's cgroup root in every v1 hierarchy (the kubelet refuses a root missing from one);
# cpuset needs its cpus and mems before anything can join it.
make_node_cgroup() {
  local name=$1 hierarchy
  for hierarchy in /sys/fs/cgroup/*/; do
    [[ $hierarchy == */unified/ ]] && continue
    mkdir -p "$hierarchy$name"
    if [[ -f ${hierarchy}cpuset.cpus ]]; then
      cat "${hierarchy}cpuset.cpus" >"$hierarchy$name/cpuset.cpus"
      cat "${hierarchy}cpuset.mems" >"$hierarchy$name/cpuset.mems"
    fi
  done
}

# Kills every process in cgroup NAME (any hierarchy) and deletes its tree, leaves first. A killed
# process leaves its cgroup only once it has exited: tried again for a while, or a later start
# finds the tree and refuses to run beside "another Kubernetes".
remove_cgroup() {
  local name=$1 cgroup i
  # v1 hierarchies, or the unified one of a cgroup v2 host.
  for cgroup in /sys/fs/cgroup/*/"$name" /sys/fs/cgroup/"$name"; do
    [[ -d $cgroup ]] || continue
    for ((i = 0; i < 50; i++)); do
      find "$cgroup" -name cgroup.procs -exec cat {} + 2>/dev/null | xargs -r kill -KILL 2>/dev/null || true
      find "$cgroup" -depth -type d -exec rmdir {} + 2>/dev/null || true
      [[ -d $cgroup ]] || break
      sleep 0.2
    done
  done
}

# Kills the node's containers at once: the shims of its containerd (they outlive it by design)
# and every process in its pod cgroups.
kill_node_containers() {
  local node=$1 nd pid name cgroup
  nd=$(node_dir "$dir" "$node") name=$(node_cgroup "$node")
  for pid in $(pgrep -f "containerd-shim.*-address $nd/containerd/containerd.sock" || true); do
    kill -KILL "$pid" 2>/dev/null || true
  done
  for cgroup in /sys/fs/cgroup/*/"$name" /sys/fs/cgroup/"$name"; do
    [[ -d $cgroup ]] || continue
    find "$cgroup" -name cgroup.procs -exec cat {} + 2>/dev/null | xargs -r kill -KILL 2>/dev/null || true
  done
}

# Writes the node's containerd, CNI, kubelet and kube-proxy configuration. Ports come from
# free_port; on a namespaced node they are in its own namespace anyway.
write_node_config() {
  local node=$1 count=$2 nd ip i ctrd cni_bridge subnet range_start cni_gateway routes
  local kubelet_port kubelet_healthz proxy_healthz proxy_metrics cgroup_root pod_logs=''
  nd=$(node_dir "$dir" "$node") ip=$(node_ip "$node") i=$(node_index "$node")
  for v in kubelet_port kubelet_healthz proxy_healthz proxy_metrics; do free_port "$v"; done
  mkdir -p "$nd"
  echo "$proxy_healthz" >"$nd/proxy-healthz.port"
  echo "$kubelet_healthz" >"$nd/kubelet-healthz.port"
  if ((i == 0)); then
    cni_bridge=$bridge subnet=$pod_cidr range_start='"rangeStart": "10.88.1.1", ' cni_gateway=$gateway
    routes="{\"dst\": \"$service_cidr\"}" cgroup_root=/
  else
    cni_bridge=cni0 subnet=10.88.$i.0/24 range_start='' cni_gateway=10.88.$i.1
    routes="{\"dst\": \"10.88.0.0/16\"}, {\"dst\": \"$service_cidr\"}" cgroup_root=/ebsbed-$node
    pod_logs="podLogsDir: $nd/pod-logs"
  fi
  ctrd=$nd/containerd
  mkdir -p "$ctrd" "$nd/cni/net.d"
  # containerd 2's configuration (schema version 3: the CRI plugin is split into image and
  # runtime sections; 1.x's io.containerd.grpc.v1.cri section would be ignored).
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
    conf_dir = "$nd/cni/net.d"
# NRI listens on a fixed host path (/var/run/nri/nri.sock) that every node would share and that
# would outlive the bed; nothing here uses it.
[plugins."io.containerd.nri.v1.nri"]
  disable = true
TOML
  # The CNI bridge: a gateway for the bed's ranges only, no default route, no masquerade.
  cat >"$nd/cni/net.d/10-testbed.conflist" <<JSON
{
  "cniVersion": "0.4.0",
  "name": "testbed",
  "plugins": [{
    "type": "bridge", "bridge": "$cni_bridge", "isGateway": true, "isDefaultGateway": false,
    "ipMasq": false, "hairpinMode": true,
    "ipam": {
      "type": "host-local", "dataDir": "$nd/cni/ipam",
      "ranges": [[{"subnet": "$subnet", ${range_start}"gateway": "$cni_gateway"}]],
      "routes": [$routes]
    }
  }, {"type": "loopback"}]
}
JSON
  cat >"$nd/kubelet.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $ip
port: $kubelet_port
healthzBindAddress: 127.0.0.1
healthzPort: $kubelet_healthz
readOnlyPort: 0
tlsCertFile: $pki/kubelet-$node.crt
tlsPrivateKeyFile: $pki/kubelet-$node.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $pki/ca.crt}
authorization: {mode: Webhook}
cgroupDriver: cgroupfs
cgroupRoot: $cgroup_root
$pod_logs
failSwapOn: false
makeIPTablesUtilChains: false
clusterDNS: [$gateway]
clusterDomain: cluster.local
resolvConf: $dir/resolv.conf
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {nodefs.available: "1%", imagefs.available: "1%", memory.available: "100Mi", nodefs.inodesFree: "1%"}
volumePluginDir: $nd/kubelet-plugins
serializeImagePulls: false
containerRuntimeEndpoint: unix://$ctrd/containerd.sock
# This machine mounts cgroup v1 hierarchies (hybrid, an empty cgroup2 at /sys/fs/cgroup/unified);
# the kubelet refuses to start on cgroup v1 unless told to accept it.
failCgroupV1: false
YAML
  cat >"$nd/kube-proxy.yaml" <<YAML
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $dir/kube-proxy.kubeconfig}
mode: iptables
clusterCIDR: $pod_cidr
hostnameOverride: $node
bindAddress: $ip
healthzBindAddress: 127.0.0.1:$proxy_healthz
metricsBindAddress: 127.0.0.1:$proxy_metrics
# Leave the machine's conntrack table size alone.
conntrack: {maxPerCore: 0}
YAML
}

# Starts the node's containerd and waits for its socket.
start_node_containerd() {
  local node=$1 nd part run
  nd=$(node_dir "$dir" "$node") part=$(node_part "$node" containerd)
  in_node_prefix "$node" run
  mkdir -p "$(dirname "$dir/logs/$part")"
  log "containerd of $node"
  start "$part" "${run[@]}" containerd --config "$nd/containerd/config.toml"
  wait_for "$part" "containerd socket of $node" ctr --address "$nd/containerd/containerd.sock" version
}

# Starts the node's kubelet and kube-proxy (its containerd runs).
start_node_kubelet() {
  local node=$1 nd ip run
  nd=$(node_dir "$dir" "$node") ip=$(node_ip "$node")
  in_node_prefix "$node" run
  log "kubelet of $node at $ip, $(node_zone "$node")"
  start "$(node_part "$node" kubelet)" "${run[@]}" "$bin/kubelet" --config "$nd/kubelet.yaml" \
    --kubeconfig "$dir/$node.kubeconfig" --root-dir "$nd/kubelet" --cert-dir "$nd/kubelet-certs" \
    --hostname-override "$node" --node-ip "$ip" \
    --node-labels "topology.kubernetes.io/zone=$(node_zone "$node")"
  start "$(node_part "$node" kube-proxy)" "${run[@]}" "$bin/kube-proxy" --config "$nd/kube-proxy.yaml"
}

# Waits until the node is Ready and its kube-proxy healthy.
wait_node_ready() {
  local node=$1 nd
  nd=$(node_dir "$dir" "$node")
  # shellcheck disable=SC2329 # called through wait_for
  node_ready() {
    [[ $("$bin/kubectl" --kubeconfig "$dir/kubeconfig" get node "$1" \
      -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null) == True ]]
  }
  wait_for "$(node_part "$node" kubelet)" "node $node Ready" node_ready "$node"
  wait_for "$(node_part "$node" kube-proxy)" "kube-proxy health on $node" \
    in_node "$node" curl -sf "http://127.0.0.1:$(cat "$nd/proxy-healthz.port")/healthz"
}

# Stops the node's parts (kube-proxy, kubelet, its containers while containerd still runs to
# tear their sandboxes down, containerd, whatever is left of the containers) and removes its
# cgroups, mounts and network namespace.
stop_node() {
  local node=$1 nd name pid mnt ns
  nd=$(node_dir "$dir" "$node")
  for name in kube-proxy kubelet containerd; do
    pid=$(recorded_pid "$dir" "$(node_part "$node" "$name")") && terminate "$node/$name" "$pid"
    rm -f "$nd/$name.pid"
    [[ $name == kubelet ]] && kill_node_containers "$node"
  done
  kill_node_containers "$node"
  remove_cgroup "$(node_cgroup "$node")"
  # Mounts under the node's files (overlay rootfs, secret tmpfs, shm), deepest first; the single
  # node's are all of DIR's.
  for mnt in $(awk -v d="$nd/" 'index($2, d) == 1 {print $2}' /proc/self/mounts | sort -r); do
    umount -l "$mnt" 2>/dev/null || true
  done
  ns=$(node_netns "$node")
  if [[ -n $ns ]]; then
    # The veth goes with its namespace, but only once the kernel gets round to destroying it:
    # deleted here, so that it is gone when --stop returns.
    ip link delete "$(node_veth "$node")" 2>/dev/null || true
    if [[ -e /run/netns/$ns ]]; then ip netns delete "$ns" 2>/dev/null || true; fi
  fi
  rm -f "$nd/state"
}

# ---- Faults (multi-node beds only) ----

# The node's fault state: up, down or partitioned.
node_state() { cat "$(node_dir "$dir" "$1")/state" 2>/dev/null || echo up; }

# Node down, as a machine powered off: its network is cut and its kubelet, kube-proxy,
# containerd and every container stop at once (SIGKILL). Its files and volumes stay.
node_down() {
  local node=$1 name pid pids=() i
  ip link set "$(node_veth "$node")" down
  for name in kubelet kube-proxy containerd; do
    if pid=$(recorded_pid "$dir" "$(node_part "$node" "$name")"); then
      kill -KILL "$pid" 2>/dev/null || true
      pids+=("$pid")
    fi
  done
  kill_node_containers "$node"
  # Gone before this returns: a containerd still exiting would hold its database when the node
  # comes up again.
  for pid in "${pids[@]}"; do
    for ((i = 0; i < 100; i++)); do alive "$pid" || break; sleep 0.1; done
  done
  echo down >"$(node_dir "$dir" "$node")/state"
  log "$node is down"
}

# Node up, as a machine powered on again: network back, containerd, kubelet and kube-proxy
# started on the same files (images, volumes, pod state). The node turns Ready by itself.
node_up() {
  local node=$1
  ip link set "$(node_veth "$node")" up
  start_node_containerd "$node"
  start_node_kubelet "$node"
  echo up >"$(node_dir "$dir" "$node")/state"
  log "$node is up again"
}

# Partition: the node's network to the other nodes, the control plane and the host is cut
# while every process on it keeps running; heal undoes it.
partition_node() {
  ip link set "$(node_veth "$1")" down
  echo partitioned >"$(node_dir "$dir" "$1")/state"
  log "$1 is cut off from the others (its processes run on)"
}

heal_node() {
  ip link set "$(node_veth "$1")" up
  echo up >"$(node_dir "$dir" "$1")/state"
  log "$1 is connected again"
}
