# shellcheck shell=bash
# One build at a time in a cache folder: two checkouts on one machine (a developer's and CI's) share
# ~/.cache/dispatch-k8s, and a script that builds into a folder of it holds the folder's lock until it exits.
# A build still makes each artifact in a temporary place of its own and renames it into place, so that an
# interrupted build never leaves one that looks complete.
#
#   source controlplane/lock.sh; cache_lock <folder>

cache_lock() { # folder
	mkdir -p "$1"
	exec {_cache_lock_fd}>>"$1/.lock"
	if ! flock -n "$_cache_lock_fd"; then
		echo "== another build holds $1; waiting for it" >&2
		flock "$_cache_lock_fd"
	fi
}
