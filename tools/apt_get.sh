#!/usr/bin/env bash
# tools/apt_get.sh TIMEOUT ARGS...: `apt-get ARGS` for the Makefile, which waits up to TIMEOUT
# seconds for another package manager holding apt's or dpkg's lock (an unattended upgrade on a
# new machine) instead of failing at once, and says what it waits for. dpkg's lock is waited for
# by apt-get itself (DPkg::Lock::Timeout); `apt-get update` does not wait for the lists lock, so
# a run that failed on a lock is tried again every APT_RETRY_SECONDS (5) until the time is up.
set -u
timeout=${1:?usage: tools/apt_get.sh TIMEOUT ARGS...}
shift
retry=${APT_RETRY_SECONDS:-5}
deadline=$((SECONDS + timeout))
log=$(mktemp)
trap 'rm -f "$log"' EXIT
while true; do
  left=$((deadline - SECONDS))
  ((left < 0)) && left=0
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout="$left" "$@" 2>&1 | tee "$log"
  status=${PIPESTATUS[0]}
  ((status == 0)) && exit 0
  # "E: Could not get lock /var/lib/apt/lists/lock. It is held by process 1826 (unattended-upgr)"
  held=$(grep -o 'Could not get lock .*' "$log" | tail -1 |
    sed -e 's/^Could not get lock //' -e 's/\. It is held by /, held by /' -e 's/\.*$//')
  if [[ -z $held ]] && grep -q 'Unable to acquire the dpkg frontend lock' "$log"; then
    held="/var/lib/dpkg/lock-frontend"
  fi
  [[ -z $held ]] && exit "$status"
  if ((SECONDS >= deadline)); then
    echo "make: gave up after $timeout s waiting for $held (raise APT_LOCK_TIMEOUT, or run" \
      "make again once that package manager is done)" >&2
    exit "$status"
  fi
  echo "make: waiting for $held; up to $((deadline - SECONDS)) s more" \
    "(APT_LOCK_TIMEOUT=$timeout)" >&2
  sleep "$retry"
done
