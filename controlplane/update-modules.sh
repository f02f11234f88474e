#!/usr/bin/env bash
# Regenerates the wrapper modules under controlplane/go/ from versions.env.
# Run it after changing a pin, then commit the resulting go.mod/go.sum files.
# Each upstream project gets its own wrapper so that it is built with the dependency graph it was
# released with (one shared module would raise every shared dependency to the maximum of all of them).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"
# shellcheck source=node.env
source "$here/node.env"
# shellcheck source=matrix.env
source "$here/matrix.env"
export GOTOOLCHAIN=local GOFLAGS=-modcacherw

only=${1:-}

# new_module DIR: empty wrapper module at DIR with the Go directive every pinned project shares.
new_module() {
	local dir=$1
	rm -rf "$dir"
	mkdir -p "$dir"
	(cd "$dir" && go mod init "dispatch-k8s.invalid/controlplane/$(basename "$dir")" >/dev/null 2>&1 &&
		go mod edit -go=1.26.0)
}

# require_kubernetes DIR [VERSION]: a wrapper requiring k8s.io/kubernetes (the pin, or VERSION) with every staging
# module replaced.
require_kubernetes() {
	local dir=$1 version=${2:-$K8S_VERSION}
	local staging_version=v0.${version#v1.}
	new_module "$dir"
	cd "$dir"
	go mod edit -require="k8s.io/kubernetes@$version"
	# k8s.io/kubernetes requires its staging modules at v0.0.0 and replaces them with ./staging paths;
	# a dependency's replaces are ignored, so every one is replaced here with its published tag.
	local gomod
	gomod=$(go mod download -json "k8s.io/kubernetes@$version" |
		python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')
	sed -n 's|^[[:space:]]*\(k8s\.io/[a-z0-9-]*\) => \./staging/src/.*|\1|p' "$gomod" |
		while read -r m; do go mod edit -replace="$m=$m@$staging_version"; done
}

kubernetes() {
	require_kubernetes "$here/go/kubernetes"
	go get -tool \
		"k8s.io/kubernetes/cmd/kube-apiserver@$K8S_VERSION" \
		"k8s.io/kubernetes/cmd/kube-controller-manager@$K8S_VERSION" \
		"k8s.io/kubernetes/cmd/kube-scheduler@$K8S_VERSION"
	go mod tidy
}

# The older Kubernetes versions of matrix.env: kube-apiserver alone, one wrapper per minor (kubernetes-v1.<minor>).
matrix() {
	local version minor
	for version in ${K8S_MATRIX//,/ }; do
		minor=${version#v1.}
		minor=${minor%%.*}
		(
			require_kubernetes "$here/go/kubernetes-v1.$minor" "$version"
			go get -tool "k8s.io/kubernetes/cmd/kube-apiserver@$version"
			go mod tidy
		)
	done
}

etcd() {
	new_module "$here/go/etcd"
	cd "$here/go/etcd"
	go get -tool "go.etcd.io/etcd/server/v3@$ETCD_VERSION"
	go mod tidy
}

kueue() {
	new_module "$here/go/kueue"
	cd "$here/go/kueue"
	go get -tool "sigs.k8s.io/kueue/cmd/kueue@$KUEUE_VERSION"
	go mod tidy
}

jobset() {
	new_module "$here/go/jobset"
	cd "$here/go/jobset"
	go get -tool "sigs.k8s.io/jobset@$JOBSET_VERSION"
	go mod tidy
}

trainer() {
	new_module "$here/go/trainer"
	cd "$here/go/trainer"
	go get -tool "github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager@$TRAINER_VERSION"
	go mod tidy
}

kwok() {
	new_module "$here/go/kwok"
	cd "$here/go/kwok"
	go get -tool "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
	go mod tidy
}

helm() {
	new_module "$here/go/helm"
	cd "$here/go/helm"
	go get -tool "helm.sh/helm/v4/cmd/helm@$HELM_VERSION"
	go mod tidy
}

# Tier C (controlplane/build-node.sh): the kubelet, kube-proxy and kubectl (for the docs' commands, run as
# written) on the control plane's pins, containerd, CNI plugins.
node() {
	require_kubernetes "$here/go/node"
	go get -tool "k8s.io/kubernetes/cmd/kubelet@$K8S_VERSION" "k8s.io/kubernetes/cmd/kube-proxy@$K8S_VERSION" \
		"k8s.io/kubernetes/cmd/kubectl@$K8S_VERSION"
	go mod tidy
}

containerd() {
	new_module "$here/go/containerd"
	cd "$here/go/containerd"
	go get -tool "github.com/containerd/containerd/v2/cmd/containerd@$CONTAINERD_VERSION" \
		"github.com/containerd/containerd/v2/cmd/ctr@$CONTAINERD_VERSION" \
		"github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@$CONTAINERD_VERSION"
	go mod tidy
}

cni() {
	new_module "$here/go/cni"
	cd "$here/go/cni"
	local p
	for p in main/bridge ipam/host-local main/loopback; do
		go get -tool "github.com/containernetworking/plugins/plugins/$p@$CNI_PLUGINS_VERSION"
	done
	go mod tidy
}

for c in kubernetes matrix etcd kueue jobset trainer kwok helm node containerd cni; do
	if [[ -z $only || $only == "$c" ]]; then
		echo "== $c"
		(set -x; "$c")
	fi
done
