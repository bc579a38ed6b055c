# Process and port helpers shared by the bed scripts (e2e/apiserver/up.sh, e2e/cluster/up.sh).
# Sourced, not run.

# True while PID runs (a zombie counts as gone: its sockets are closed once all threads exit).
alive() {
  local state
  state=$(awk '/^State:/ {print $2}' "/proc/$1/status" 2>/dev/null) || return 1
  [[ -n $state && $state != Z ]]
}

# The pid recorded in DIR/NAME.pid, if that process still runs and its command line names NAME
# (pids get reused).
recorded_pid() {
  local dir=$1 name=$2 pid
  pid=$(cat "$dir/$name.pid" 2>/dev/null) || return 1
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  alive "$pid" || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "$name" || return 1
  echo "$pid"
}

# Sets variable $1 to a free port below the ephemeral range (so outgoing connections cannot take
# it between the check and the server's bind), never one handed out before by this run.
used_ports=()
free_port() {
  local port
  while :; do
    port=$((10000 + RANDOM % 22000))
    [[ " ${used_ports[*]} " == *" $port "* ]] && continue
    [[ -z $(ss -Htan "( sport = :$port )" 2>/dev/null) ]] || continue
    used_ports+=("$port")
    printf -v "$1" %s "$port"
    return
  done
}
