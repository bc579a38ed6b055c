# The upstream versions the beds run, and where their builds are cached. Sourced by build.sh,
# up.sh, images.sh and e2e/apiserver/up.sh; not run. Each version is built from its published Go
# module with the go.mod/go.sum pinned in e2e/upstream/<name>-<version>/ (see build.sh).
#
#   KUBE_VERSION          the Kubernetes minor of the bed: 1.37 (default) or 1.35
#   ETCD_TESTBED_VERSION  the etcd tests run on loopback: v3.7.3 (default), v3.6.16 or v3.5.33

KUBE_VERSION=${KUBE_VERSION:-1.37}
case $KUBE_VERSION in
  1.37) kube_release=v1.37.2 control_plane_etcd=v3.7.3 ;;
  1.35) kube_release=v1.35.4 control_plane_etcd=v3.6.16 ;;
  *)
    echo "KUBE_VERSION=$KUBE_VERSION is not one the bed builds: use 1.37 (the default) or 1.35" >&2
    exit 2
    ;;
esac
# The etcd versions of the member images (localhost/etcd:<version>): the newest patch of each
# line users run. The control plane's etcd is one of them.
etcd_releases=(v3.5.33 v3.6.16 v3.7.3)
# Patches below the minimum the operator requires before the next minor (3.5.32 before 3.6,
# 3.6.11 before 3.7; see crates/etcd-cluster/src/version.rs): member images too, so that the
# tests run clusters whose upgrade must be refused. (3.5.21: the Go module proxy this project
# builds from serves every module of it; of the later 3.5 patches tried, none.)
etcd_refused_patches=(v3.5.21 v3.6.10)
# The etcd of the demo's cluster (e2e/demo/src/main.rs names it): `build.sh --demo`
# builds it and the control plane's etcd only.
demo_etcd_release=v3.7.3
# Kubernetes 1.36 and later need containerd 2; 1.35 runs on it too.
containerd_release=v2.2.9
# The GCS emulator the storage tests run against (fake-gcs-server's JSON API, resumable uploads).
fake_gcs_release=v1.56.1
# Helm, for the chart's tests (deploy/helm): render, lint, install and upgrade on the bed.
helm_release=v3.22.0

upstream_cache=${XDG_CACHE_HOME:-$HOME/.cache}/etcd-backup-suite
# KUBE_TESTBED_BIN (the Kubernetes binaries) and KUBE_TESTBED_CACHE keep their meaning from
# before the move: the bin dir, and the dir that holds it.
kube_cache=${KUBE_TESTBED_CACHE:-$upstream_cache/kubernetes-$kube_release}
kube_bin=${KUBE_TESTBED_BIN:-$kube_cache/bin}
etcd_bin() { echo "$upstream_cache/etcd-$1/bin"; }
# The etcd that tests run as a process on loopback (testbed::Etcd, the CLIs' tests): the newest
# line, or ETCD_TESTBED_VERSION (one of etcd_releases).
testbed_etcd_bin=$(etcd_bin "${ETCD_TESTBED_VERSION:-${etcd_releases[-1]}}")
containerd_bin=$upstream_cache/containerd-$containerd_release/bin
fake_gcs_bin=$upstream_cache/fake-gcs-server-$fake_gcs_release/bin
helm_bin=$upstream_cache/helm-$helm_release/bin
