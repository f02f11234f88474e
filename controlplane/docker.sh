# shellcheck shell=bash
# A private Docker engine for building images, started and stopped by the script that sources this file.
# It has its own data root (in the cache), exec root and socket, and no network of its own: no bridge, no
# iptables rules, no masquerade (image builds here never fetch anything). Debian's docker.io client is used
# by path: another `docker` earlier in PATH may lack BuildKit's built-in frontend.
#
#   source controlplane/docker.sh; docker_up <data-root>; docker_cli build ...; docker_down

DOCKER_CLI=/usr/bin/docker
_docker_dir=""

docker_up() { # data-root
	if ! command -v dockerd >/dev/null || [[ ! -x $DOCKER_CLI ]]; then
		echo "docker.sh: dockerd and $DOCKER_CLI are needed: apt-get install docker.io" >&2
		return 1
	fi
	_docker_dir=$(mktemp -d /tmp/dispatch-k8s-docker.XXXXXX)
	mkdir -p "$1"
	dockerd --data-root "$1" --exec-root "$_docker_dir/exec" --host "unix://$_docker_dir/docker.sock" \
		--pidfile "$_docker_dir/docker.pid" --bridge=none --iptables=false --ip6tables=false --ip-masq=false \
		>"$_docker_dir/dockerd.log" 2>&1 &
	local _
	for _ in $(seq 1 120); do
		if "$DOCKER_CLI" -H "unix://$_docker_dir/docker.sock" version >/dev/null 2>&1; then return 0; fi
		sleep 0.5
	done
	echo "docker.sh: dockerd did not start; its log:" >&2
	tail -20 "$_docker_dir/dockerd.log" >&2
	docker_down
	return 1
}

docker_cli() {
	DOCKER_BUILDKIT=1 "$DOCKER_CLI" -H "unix://$_docker_dir/docker.sock" "$@"
}

docker_down() {
	[[ -n $_docker_dir ]] || return 0
	local pid
	pid=$(cat "$_docker_dir/docker.pid" 2>/dev/null || true)
	if [[ -n $pid ]]; then
		kill "$pid" 2>/dev/null || true
		# dockerd stops its own containerd; wait for both.
		for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
	fi
	rm -rf "$_docker_dir"
	_docker_dir=""
}
