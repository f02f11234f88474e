#!/usr/bin/env bash
# Builds tier C's real nodes into their own cache folder (never tier A/B's): the kubelet, kube-proxy and kubectl
# from the pinned k8s.io/kubernetes (controlplane/go/node, same pins as the control plane), containerd 2 and the CNI
# plugins from their modules, and the base images from Debian packages (debootstrap, then `docker import`
# and `docker build` in a private Docker engine that stops when the build ends). Only what is missing is built.
#
#   controlplane/build-node.sh              build what is missing (as root)
#   controlplane/build-node.sh --print-dir  print the cache folder and exit
#
# Needs Go (as build.sh) and, as root, Debian's debootstrap, docker.io and runc; with --install-packages
# it installs those with apt-get first.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"
# shellcheck source=node.env
source "$here/node.env"
# shellcheck source=docker.sh
source "$here/docker.sh"
# shellcheck source=lock.sh
source "$here/lock.sh"

# The key must match harness/binaries.py (node_cache_key).
key="node-${K8S_VERSION}-$(cat "$here/versions.env" "$here/node.env" | sha256sum | cut -c1-12)"
root="${DISPATCH_K8S_CACHE:-$HOME/.cache/dispatch-k8s}/node/$key"

if [[ ${1:-} == --print-dir ]]; then
	echo "$root"
	exit 0
fi

packages=(debootstrap docker.io runc iproute2 nftables)
if [[ ${1:-} == --install-packages ]]; then
	missing=()
	for p in "${packages[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
	if [[ ${#missing[@]} -gt 0 ]]; then
		echo "== apt-get install ${missing[*]}"
		apt-get update -q >/dev/null
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >/dev/null
	fi
fi

export GOTOOLCHAIN=local CGO_ENABLED=0
export GOFLAGS="-modcacherw -buildvcs=false -mod=readonly"

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

require_version() { # dir module expected
	local got
	got=$(cd "$here/go/$1" && go list -m -f '{{.Version}}' "$2")
	if [[ $got != "$3" ]]; then
		echo "build-node.sh: controlplane/go/$1 requires $2 $got but the pins say $3;" \
			"run controlplane/update-modules.sh $1" >&2
		exit 1
	fi
}

# go_build OUT_DIR WRAPPER LDFLAGS TAGS PACKAGE...: builds to a temporary folder and renames each binary.
go_build() {
	local out=$1 dir=$2 ldflags=$3 tags=$4 start p name tmp
	shift 4
	local todo=()
	for p in "$@"; do [[ -x $out/${p##*/} ]] || todo+=("$p"); done
	if [[ ${#todo[@]} -eq 0 ]]; then
		echo "== $*: present"
		return
	fi
	echo "== building ${todo[*]}"
	start=$(now)
	mkdir -p "$out"
	tmp=$(mktemp -d "$out.tmp.XXXXXX")
	(cd "$here/go/$dir" && nice -n 10 go build -trimpath -pgo=off -tags="$tags" -ldflags="-s -w $ldflags" \
		-o "$tmp/" "${todo[@]}")
	for p in "${todo[@]}"; do
		name=${p##*/}
		mv -f "$tmp/$name" "$out/$name"
	done
	rmdir "$tmp"
	echo "== built in $(elapsed "$start") s"
}

kube_ldflags() { # as build.sh: the kubelet reports this version to the API server
	local minor=${K8S_VERSION#v1.} flags="" p
	minor=${minor%%.*}
	for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		flags+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor"
		flags+=" -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
	done
	echo "$flags"
}

# --- images ---------------------------------------------------------------------------------------

base_images() {
	local out=$root/images/base.tar start tmp
	if [[ -f $out ]]; then
		echo "== images/base.tar: present"
		return
	fi
	[[ $(id -u) == 0 ]] || {
		echo "build-node.sh: building the base images needs root (debootstrap, dockerd)" >&2
		exit 1
	}
	command -v debootstrap >/dev/null || {
		echo "build-node.sh: debootstrap is missing: apt-get install debootstrap (or pass --install-packages)" >&2
		exit 1
	}
	start=$(now)
	tmp=$(mktemp -d /tmp/dispatch-k8s-base.XXXXXX)
	trap 'docker_down; rm -rf "$tmp"' EXIT
	echo "== debootstrap $DEBIAN_SUITE ($DEBIAN_PACKAGES)"
	debootstrap --variant=minbase --include="$DEBIAN_PACKAGES" "$DEBIAN_SUITE" "$tmp/rootfs" \
		http://deb.debian.org/debian >"$tmp/debootstrap.log" 2>&1 || {
		tail -20 "$tmp/debootstrap.log" >&2
		exit 1
	}
	# pip and python on PATH, as in the official python image.
	chroot "$tmp/rootfs" python3 -m venv /opt/python
	rm -rf "$tmp/rootfs/var/cache/apt/archives"/*.deb "$tmp/rootfs/var/lib/apt/lists"/*
	docker_up "$root/docker"
	local base=dispatch-k8s.local/debian-python:$DEBIAN_SUITE pause=dispatch-k8s.local/pause:$NODE_BUILD_REVISION
	tar -C "$tmp/rootfs" --numeric-owner -c . | docker_cli import \
		-c 'ENV PATH=/opt/python/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
		-c 'CMD ["python3"]' - "$base" >/dev/null
	# The pod sandbox's process: nothing to do but exist (the same layers as the base, so no extra space).
	mkdir -p "$tmp/pause"
	printf 'FROM %s\nSTOPSIGNAL SIGKILL\nENTRYPOINT ["/bin/sleep", "infinity"]\n' "$base" >"$tmp/pause/Dockerfile"
	docker_cli build -q -t "$pause" "$tmp/pause" >/dev/null
	mkdir -p "$root/images"
	docker_cli save -o "$out.tmp" "$base" "$pause"
	mv "$out.tmp" "$out"
	docker_down
	rm -rf "$tmp"
	trap - EXIT
	echo "== images/base.tar: built in $(elapsed "$start") s ($(du -h "$out" | cut -f1))"
}

# --- main ---------------------------------------------------------------------------------------

echo "build-node.sh: cache $root"
total_start=$(now)
command -v go >/dev/null || {
	echo "build-node.sh: Go is not installed (need Go >= 1.26)" >&2
	exit 1
}
require_version node k8s.io/kubernetes "$K8S_VERSION"
require_version node k8s.io/kubelet "v0.${K8S_VERSION#v1.}"
require_version containerd github.com/containerd/containerd/v2 "$CONTAINERD_VERSION"
require_version cni github.com/containernetworking/plugins "$CNI_PLUGINS_VERSION"
mkdir -p "$root/bin"
cache_lock "$root"
cat "$here/versions.env" "$here/node.env" >"$root/versions.env"

# kubectl runs the docs' commands as written (tests/docs/test_quickstart.py), at the cluster's own version.
go_build "$root/bin" node "$(kube_ldflags)" selinux,notest,grpcnotrace k8s.io/kubernetes/cmd/kubelet \
	k8s.io/kubernetes/cmd/kube-proxy k8s.io/kubernetes/cmd/kubectl
# No btrfs, devmapper or zfs snapshotters: they need cgo, and the nodes use overlayfs.
go_build "$root/bin" containerd "-X github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION" \
	no_btrfs,no_devmapper,no_zfs \
	github.com/containerd/containerd/v2/cmd/containerd github.com/containerd/containerd/v2/cmd/ctr \
	github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2
go_build "$root/bin/cni" cni "" "" github.com/containernetworking/plugins/plugins/main/bridge \
	github.com/containernetworking/plugins/plugins/ipam/host-local github.com/containernetworking/plugins/plugins/main/loopback
base_images
echo "build-node.sh: done in $(elapsed "$total_start") s"
