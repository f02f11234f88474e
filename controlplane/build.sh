#!/usr/bin/env bash
# Builds the local control plane from the pinned Go modules into a cache folder keyed by
# versions.env, and copies the CRDs and manifests from the same module versions next to the
# binaries, so that binaries and CRDs never drift. Only what is missing is built.
#
#   controlplane/build.sh                 build everything that is missing
#   controlplane/build.sh etcd kube-apiserver   build only these (names as in bin/)
#   controlplane/build.sh cert-manager-crds     only cert-manager's CRDs (cert-manager.env; own cache folder)
#   controlplane/build.sh --print-dir     print the cache folder and exit
#   controlplane/build.sh --kube VERSION [kube-apiserver | --print-dir]
#                                         an older Kubernetes of matrix.env: its kube-apiserver alone, from its own
#                                         wrapper (go/kubernetes-v1.<minor>), into a cache folder of its own
#
# Environment:
#   DISPATCH_K8S_CACHE   cache root (default ~/.cache/dispatch-k8s)
#   BUILD_TIME_DIR       if set, each `go build` runs under /usr/bin/time -v, report in DIR/<binary>.time
# The only prerequisite is Go (1.26, used as is: GOTOOLCHAIN=local); modules come from GOPROXY.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"
# shellcheck source=lock.sh
source "$here/lock.sh"

# The key must match harness/binaries.py: Kubernetes version plus the first 12 hex digits of
# sha256(versions.env), so any change of pin gets a fresh folder.
key="k8s-${K8S_VERSION}-$(sha256sum "$here/versions.env" | cut -c1-12)"
root="${DISPATCH_K8S_CACHE:-$HOME/.cache/dispatch-k8s}/controlplane/$key"

# --kube VERSION: an older Kubernetes of matrix.env (docs/compatibility.md). Only its kube-apiserver is built, from
# its own wrapper, into kube-VERSION-<first 12 hex of sha256 of the wrapper's go.mod> (harness/binaries.py computes
# the same); etcd, the CRDs and the manifests stay the pinned build's.
kube_wrapper=kubernetes
if [[ ${1:-} == --kube ]]; then
	# shellcheck source=matrix.env
	source "$here/matrix.env"
	K8S_VERSION=${2:?build.sh: --kube needs a version of matrix.env}
	shift 2
	if [[ ,$K8S_MATRIX, != *",$K8S_VERSION,"* ]]; then
		echo "build.sh: $K8S_VERSION is not in controlplane/matrix.env (K8S_MATRIX=$K8S_MATRIX)" >&2
		exit 2
	fi
	kube_wrapper=${K8S_VERSION#v1.}
	kube_wrapper=kubernetes-v1.${kube_wrapper%%.*}
	[[ -f $here/go/$kube_wrapper/go.mod ]] || {
		echo "build.sh: no controlplane/go/$kube_wrapper; run controlplane/update-modules.sh matrix" >&2
		exit 1
	}
	root="${DISPATCH_K8S_CACHE:-$HOME/.cache/dispatch-k8s}/controlplane/kube-${K8S_VERSION}-$(sha256sum "$here/go/$kube_wrapper/go.mod" | cut -c1-12)"
	for b in "$@"; do
		[[ $b == kube-apiserver || $b == --print-dir ]] || {
			echo "build.sh: --kube builds kube-apiserver alone, not $b" >&2
			exit 2
		}
	done
	[[ $# -gt 0 ]] || set -- kube-apiserver
fi

if [[ ${1:-} == --print-dir ]]; then
	echo "$root"
	exit 0
fi

export GOTOOLCHAIN=local CGO_ENABLED=0
# -buildvcs=false: the wrappers live inside this repository, whose VCS state says nothing about the
# binaries. -modcacherw: lets `go clean -modcache` or rm remove the module cache.
export GOFLAGS="-modcacherw -buildvcs=false -mod=readonly"

command -v go >/dev/null || {
	echo "build.sh: Go is not installed (need Go >= 1.26)" >&2
	exit 1
}

mkdir -p "$root/bin"
cache_lock "$root"

# --- consistency: the wrapper modules must require exactly the pinned versions -------------------

require_version() { # dir module expected
	local got
	got=$(cd "$here/go/$1" && go list -m -f '{{.Version}}' "$2")
	if [[ $got != "$3" ]]; then
		echo "build.sh: controlplane/go/$1 requires $2 $got but versions.env pins $3;" \
			"run controlplane/update-modules.sh $1" >&2
		exit 1
	fi
}

check_wrappers() {
	require_version kubernetes k8s.io/kubernetes "$K8S_VERSION"
	require_version kubernetes k8s.io/apiserver "v0.${K8S_VERSION#v1.}"
	require_version etcd go.etcd.io/etcd/server/v3 "$ETCD_VERSION"
	require_version kueue sigs.k8s.io/kueue "$KUEUE_VERSION"
	require_version jobset sigs.k8s.io/jobset "$JOBSET_VERSION"
	require_version trainer github.com/kubeflow/trainer/v2 "$TRAINER_VERSION"
	require_version kwok sigs.k8s.io/kwok "$KWOK_VERSION"
	require_version helm helm.sh/helm/v4 "$HELM_VERSION"
}

# --- building ----------------------------------------------------------------------------------

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# go_build NAME WRAPPER_DIR PACKAGE LDFLAGS [TAGS]: builds one binary to a temporary name and renames it,
# so an interrupted build never leaves a binary that looks complete.
go_build() {
	local name=$1 dir=$2 pkg=$3 ldflags=$4 tags=${5:-} out="$root/bin/$1" start
	if [[ -x $out ]]; then
		echo "== $name: present"
		return
	fi
	echo "== $name: building $pkg"
	start=$(now)
	local -a timer=()
	if [[ -n ${BUILD_TIME_DIR:-} ]]; then
		mkdir -p "$BUILD_TIME_DIR"
		timer=(/usr/bin/time -v -o "$BUILD_TIME_DIR/$name.time")
	fi
	(cd "$here/go/$dir" &&
		"${timer[@]}" go build -trimpath -pgo=off -tags="$tags" \
			-ldflags="-s -w $ldflags" -o "$out.tmp.$$" "$pkg")
	mv -f "$out.tmp.$$" "$out"
	echo "== $name: built in $(elapsed "$start") s ($(du -h "$out" | cut -f1))"
}

module_dir() { # dir module -> directory of that module in GOMODCACHE (downloads it if needed)
	(cd "$here/go/$1" && go mod download "$2" && go list -m -f '{{.Dir}}' "$2")
}

origin_hash() { # dir module -> the commit of the tag, when the proxy recorded one in the .info file
	local info
	info=$(cd "$here/go/$1" && go mod download -json "$2" | sed -n 's/^[[:space:]]*"Info": "\(.*\)",$/\1/p')
	if [[ -f $info ]]; then grep -o '"Hash":"[0-9a-f]*"' "$info" | cut -d'"' -f4 || true; fi
}

kube_ldflags() {
	# Kueue parses the apiserver's /version as semver and exits on the unstamped placeholder, and
	# a wrong minor would shift the emulation version; stamp exactly what upstream's version.sh does.
	local minor=${K8S_VERSION#v1.} flags="" p commit
	minor=${minor%%.*}
	commit=$(origin_hash "$kube_wrapper" k8s.io/kubernetes)
	for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		flags+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor"
		flags+=" -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
		[[ -n $commit ]] && flags+=" -X $p.gitCommit=$commit"
	done
	echo "$flags"
}

build_binary() {
	case $1 in
	etcd) go_build etcd etcd go.etcd.io/etcd/server/v3 "" ;;
	kube-apiserver | kube-controller-manager | kube-scheduler)
		# The tags of upstream's hack/lib/golang.sh.
		go_build "$1" "$kube_wrapper" "k8s.io/kubernetes/cmd/$1" "$(kube_ldflags)" selinux,notest,grpcnotrace ;;
	kueue)
		go_build kueue kueue sigs.k8s.io/kueue/cmd/kueue \
			"-X sigs.k8s.io/kueue/pkg/version.GitVersion=$KUEUE_VERSION -X sigs.k8s.io/kueue/pkg/version.GitCommit=$(origin_hash kueue sigs.k8s.io/kueue)" ;;
	jobset)
		go_build jobset jobset sigs.k8s.io/jobset \
			"-X sigs.k8s.io/jobset/pkg/version.GitVersion=$JOBSET_VERSION -X sigs.k8s.io/jobset/pkg/version.GitCommit=$(origin_hash jobset sigs.k8s.io/jobset)" ;;
	trainer-controller-manager)
		go_build trainer-controller-manager trainer github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager "" ;;
	kwok)
		go_build kwok kwok sigs.k8s.io/kwok/cmd/kwok \
			"-X sigs.k8s.io/kwok/pkg/consts.Version=${KWOK_VERSION#v} -X sigs.k8s.io/kwok/pkg/consts.KubeVersion=$K8S_VERSION" ;;
	helm)
		go_build helm helm helm.sh/helm/v4/cmd/helm \
			"-X helm.sh/helm/v4/internal/version.version=$HELM_VERSION -X helm.sh/helm/v4/internal/version.gitTreeState=clean" ;;
	*)
		echo "build.sh: unknown binary $1" >&2
		exit 2
		;;
	esac
}

# --- CRDs and manifests from the module cache --------------------------------------------------

# copy_tree NAME: fills $root/NAME from a function that writes into its first argument; a finished
# tree is renamed into place, so a half-copied folder is never taken for complete. cert-manager's folder is
# not under the lock: where another build renamed its copy into place first, this one's is dropped.
copy_tree() {
	local name=$1 fill=$2 tmp
	if [[ -d $root/$name ]]; then
		echo "== $name: present"
		return
	fi
	tmp=$(mktemp -d "$root/$name.tmp.XXXXXX")
	"$fill" "$tmp"
	chmod -R u+w "$tmp"
	chmod 755 "$tmp"
	mv -T "$tmp" "$root/$name" 2>/dev/null || rm -rf "$tmp"
	echo "== $name: copied ($(find "$root/$name" -type f | wc -l) files)"
}

fill_crds() {
	local out=$1 kueue jobset trainer
	kueue=$(module_dir kueue sigs.k8s.io/kueue)
	jobset=$(module_dir jobset sigs.k8s.io/jobset)
	trainer=$(module_dir trainer github.com/kubeflow/trainer/v2)
	mkdir -p "$out/kueue" "$out/jobset" "$out/trainer"
	cp "$kueue"/config/components/crd/bases/*.yaml "$out/kueue/"
	cp "$jobset"/config/components/crd/bases/*.yaml "$out/jobset/"
	cp "$trainer"/manifests/base/crds/trainer.kubeflow.org_*.yaml "$out/trainer/"
}

fill_manifests() {
	local out=$1 kueue jobset trainer kwok
	kueue=$(module_dir kueue sigs.k8s.io/kueue)
	jobset=$(module_dir jobset sigs.k8s.io/jobset)
	trainer=$(module_dir trainer github.com/kubeflow/trainer/v2)
	kwok=$(module_dir kwok sigs.k8s.io/kwok)
	mkdir -p "$out/kueue" "$out/jobset" "$out/trainer/runtimes" "$out/kwok/stages"
	# The webhook manifests before kustomize, with the kustomization and patches upstream applies
	# to them (harness/webhooks.py performs those few steps).
	cp "$kueue/config/components/webhook/manifests.yaml" "$out/kueue/webhook.yaml"
	cp "$kueue/config/components/webhook/kustomization.yaml" "$out/kueue/webhook-kustomization.yaml"
	cp "$kueue/config/components/manager/controller_manager_config.yaml" "$out/kueue/"
	cp "$jobset/config/components/webhook/manifests.yaml" "$out/jobset/webhook.yaml"
	cp "$jobset/config/components/webhook/kustomization.yaml" "$out/jobset/webhook-kustomization.yaml"
	mkdir -p "$out/jobset/patches"
	cp "$jobset"/config/components/webhook/patches/*.yaml "$out/jobset/patches/"
	cp "$jobset/config/components/manager/controller_manager_config.yaml" "$out/jobset/"
	cp "$trainer/manifests/base/webhook/manifests.yaml" "$out/trainer/webhook.yaml"
	cp "$trainer/manifests/base/webhook/kustomization.yaml" "$out/trainer/webhook-kustomization.yaml"
	cp "$trainer/manifests/base/webhook/patch_mutating.yaml" "$trainer/manifests/base/webhook/patch_validating.yaml" \
		"$out/trainer/"
	cp "$trainer/manifests/base/manager/controller_manager_config.yaml" "$out/trainer/"
	cp "$trainer"/manifests/base/runtimes/*.yaml "$out/trainer/runtimes/"
	rm -f "$out/trainer/runtimes/kustomization.yaml"
	cp "$kwok"/kustomize/stage/node/fast/node-initialize.yaml \
		"$kwok"/kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
		"$kwok"/kustomize/stage/pod/general/*.yaml \
		"$kwok"/kustomize/stage/pod/chaos/pod-container-running-failed.yaml \
		"$out/kwok/stages/"
	rm -f "$out/kwok/stages/kustomization.yaml"
}

# --- cert-manager's CRDs (the chart's certs.mode cert-manager), in their own cache folder -----------

# shellcheck source=cert-manager.env
source "$here/cert-manager.env"
cert_manager_root="${DISPATCH_K8S_CACHE:-$HOME/.cache/dispatch-k8s}/controlplane/cert-manager-${CERT_MANAGER_VERSION}-$(sha256sum "$here/cert-manager.env" | cut -c1-12)"

fill_cert_manager_crds() {
	local out=$1 dir
	# Outside any module: `go mod download` of one module version into GOMODCACHE, from GOPROXY.
	dir=$(cd / && GOFLAGS=-modcacherw go mod download -json "github.com/cert-manager/cert-manager@$CERT_MANAGER_VERSION" |
		sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
	[[ -d $dir/deploy/crds ]] || {
		echo "build.sh: no deploy/crds in github.com/cert-manager/cert-manager@$CERT_MANAGER_VERSION" >&2
		exit 1
	}
	cp "$dir"/deploy/crds/cert-manager.io_*.yaml "$out/"
}

cert_manager_crds() {
	mkdir -p "$cert_manager_root"
	local saved=$root
	root=$cert_manager_root
	copy_tree crds fill_cert_manager_crds
	root=$saved
}

# --- main ---------------------------------------------------------------------------------------

all_binaries=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok jobset trainer-controller-manager kueue helm
	cert-manager-crds)
wanted=("$@")
[[ ${#wanted[@]} -gt 0 ]] || wanted=("${all_binaries[@]}")

echo "build.sh: cache $root"
total_start=$(now)
if [[ $kube_wrapper == kubernetes ]]; then
	check_wrappers
	cp "$here/versions.env" "$root/versions.env"
	copy_tree crds fill_crds
	copy_tree manifests fill_manifests
else
	require_version "$kube_wrapper" k8s.io/kubernetes "$K8S_VERSION"
	require_version "$kube_wrapper" k8s.io/apiserver "v0.${K8S_VERSION#v1.}"
fi
for b in "${wanted[@]}"; do
	if [[ $b == cert-manager-crds ]]; then
		cert_manager_crds
	else
		build_binary "$b"
	fi
done
echo "build.sh: done in $(elapsed "$total_start") s"
