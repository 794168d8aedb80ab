# Shared settings of tests/cloud/up and tests/cloud/down (sourced, not run).
# Everything the cloud writes lives under the state dir; the download cache
# lives outside it so that a wiped state dir reinstalls from local files.

CLOUD_SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
S=${STACKHOOK_CLOUD_DIR:-/var/tmp/stackhook-cloud}
CACHE=${STACKHOOK_CLOUD_CACHE:-/var/cache/stackhook-cloud}

# All listeners are on 127.0.0.1, in BASE..BASE+19 (default 17000-17019).
BASE=${STACKHOOK_CLOUD_PORT_BASE:-17000}
P_KEYSTONE=$((BASE + 0))
P_NOVA=$((BASE + 1))
P_PLACEMENT=$((BASE + 2))
P_GLANCE=$((BASE + 3))
P_NEUTRON=$((BASE + 4))
P_OCTAVIA=$((BASE + 5))
P_CINDER=$((BASE + 6))
P_MARIADB=$((BASE + 10))
P_AMQP=$((BASE + 11))
P_ERLDIST=$((BASE + 12))
P_EPMD=$((BASE + 13))
P_OCTAVIA_HM=$((BASE + 14)) # configured only; the health manager is not run

# Passwords of a throwaway cloud that only listens on loopback.
PW=stackhook-cloud

# Started processes, stopped in reverse order by ./down.
INFRA_PROCS="rabbitmq mariadb epmd"

# "PID STARTTIME" identifies a process even after the PID number is reused.
proc_starttime() {
	local st
	{ read -r st <"/proc/$1/stat"; } 2>/dev/null || return 1
	st=${st##*) }
	# shellcheck disable=SC2086
	set -- $st
	echo "${20}"
}

alive() { # NAME: is the recorded process still the one we started?
	local f="$S/pids/$1" pid st
	[ -f "$f" ] || return 1
	read -r pid st <"$f" || return 1
	[ -n "$pid" ] && [ "$(proc_starttime "$pid")" = "$st" ]
}

live_pgids() { # "PID:PGID" of every process (one /proc scan, no forks)
	local d st
	for d in /proc/[0-9]*; do
		{ read -r st <"$d/stat"; } 2>/dev/null || continue
		st=${st##*) }
		# shellcheck disable=SC2086
		set -- $st
		echo "${d#/proc/}:$3"
	done
	return 0
}

group_members() { # PGID: PIDs still in that process group
	local e
	for e in $(live_pgids); do
		[ "${e#*:}" = "$1" ] && echo "${e%%:*}"
	done
	return 0
}

export STACKHOOK_CLOUD_DIR="$S" STACKHOOK_CLOUD_PORT_BASE="$BASE"
