#!/usr/bin/env bash
# Builds promtool (Prometheus's rule checker) at a pinned version from the Go module proxy into its own
# cache folder, for tests/charts/test_prometheusrule.py (`promtool test rules` on the chart's alerts). Kept
# apart from build.sh and versions.env, so this pin never changes the control plane's cache key.
#
#   controlplane/promtool.sh               build it if missing, print its path
#   controlplane/promtool.sh --print-path  only print where it is (or would be)
#
# Environment: DISPATCH_K8S_CACHE, the cache root (default ~/.cache/dispatch-k8s), as build.sh.
set -euo pipefail

# Prometheus v3.x's module is github.com/prometheus/prometheus v0.3xx.y; cmd/promtool of that version.
PROMTOOL_MODULE_VERSION=v0.316.0

dir="${DISPATCH_K8S_CACHE:-$HOME/.cache/dispatch-k8s}/tools/promtool-$PROMTOOL_MODULE_VERSION"
if [[ ${1:-} == --print-path ]]; then
	echo "$dir/promtool"
	exit 0
fi
if [[ -x $dir/promtool ]]; then
	echo "$dir/promtool"
	exit 0
fi
command -v go >/dev/null || {
	echo "promtool.sh: Go is not installed (need Go >= 1.26)" >&2
	exit 1
}
# shellcheck source=lock.sh
source "$(dirname "${BASH_SOURCE[0]}")/lock.sh"
cache_lock "$dir"
if [[ -x $dir/promtool ]]; then # another run built it while this one waited
	echo "$dir/promtool"
	exit 0
fi
echo "== promtool $PROMTOOL_MODULE_VERSION: building (a few minutes, once)" >&2
tmp=$(mktemp -d "$dir/build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# Into a temporary folder, then renamed: an interrupted build never leaves a binary that looks complete.
# remove_all_sd (Prometheus's own build tag, plugins/) leaves out every service-discovery plugin (the AWS,
# Azure, GCE, Kubernetes, ... SDKs): checking and testing rules needs none, and they were most of the build.
GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS="-modcacherw -buildvcs=false" GOBIN="$tmp" \
	nice go install -tags=remove_all_sd \
	"github.com/prometheus/prometheus/cmd/promtool@$PROMTOOL_MODULE_VERSION" >&2
mv "$tmp/promtool" "$dir/promtool"
echo "$dir/promtool"
