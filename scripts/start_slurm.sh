#!/usr/bin/env bash
# Install (Debian apt) and start a single-node Slurm on this machine, then wait until the node
# is idle. Idempotent: rerunning leaves a running cluster alone (and resumes a down node).
#
#   sudo scripts/start_slurm.sh            # or as root; CI (.ci/run) calls it
#   ESOPT_SLURM_PARTITION=debug ESOPT_SLURM_WAIT=60 scripts/start_slurm.sh
#
# Layout: munge key /etc/munge/munge.key (1024 random bytes, munge:munge,
# 0400), munged as user munge, /etc/slurm/slurm.conf with SlurmctldHost=$(hostname -s),
# cons_tres + CR_Core, CPUs=$(nproc), RealMemory below the machine's, ReturnToService=2,
# proctrack/linuxproc, task/none, SlurmUser=root, no accounting daemon (sacct is unavailable;
# submitit falls back to its own result files). Logs: /var/log/slurm/.
# On failure it prints one line `start_slurm: error: ...` on stderr and exits 1.
set -uo pipefail

PARTITION="${ESOPT_SLURM_PARTITION:-debug}"
WAIT_S="${ESOPT_SLURM_WAIT:-60}"
CONF_DIR=/etc/slurm
CONF="$CONF_DIR/slurm.conf"
LOG_DIR=/var/log/slurm
STATE_DIR=/var/lib/slurm/slurmctld
SPOOL_DIR=/var/spool/slurmd

die() { echo "start_slurm: error: $*" >&2; exit 1; }
say() { echo "start_slurm: $*"; }

SUDO=""
if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO="sudo -n"
    else die "needs root (or password-less sudo) to install and start Slurm"; fi
fi
HOST="$(hostname -s)"

node_state() { sinfo -h -N -n "$HOST" -o '%t' 2>/dev/null | head -1; }
running() { [ -s "/run/$1.pid" ] && kill -0 "$(cat "/run/$1.pid")" 2>/dev/null; }
# A dead slurmd makes the node not up, even while slurmctld still lists it idle (it notices
# only after SlurmdTimeout).
ours_alive() { pgrep -x slurmctld >/dev/null 2>&1 && pgrep -x slurmd >/dev/null 2>&1; }

# Already up? Nothing to do.
case "$(node_state)" in
    idle|mix|alloc|comp) if ours_alive; then say "node $HOST already up ($(node_state))"; exit 0; fi ;;
esac

# 1. Packages (one apt-get update, then install only what is missing).
need=()
for bin_pkg in munged:munge slurmctld:slurmctld slurmd:slurmd sinfo:slurm-client; do
    command -v "${bin_pkg%%:*}" >/dev/null 2>&1 || need+=("${bin_pkg##*:}")
done
if [ ${#need[@]} -gt 0 ]; then
    command -v apt-get >/dev/null 2>&1 || die "apt-get not found (this script supports Debian/Ubuntu); install: ${need[*]}"
    say "installing ${need[*]} (apt-get)"
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq >/tmp/start_slurm.apt.log 2>&1 \
        || die "apt-get update failed (network?); see /tmp/start_slurm.apt.log"
    $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >>/tmp/start_slurm.apt.log 2>&1 \
        || die "apt-get install ${need[*]} failed; see /tmp/start_slurm.apt.log"
fi

# 2. Munge: key + daemon.
$SUDO mkdir -p /etc/munge /run/munge /var/lib/munge /var/log/munge
if [ ! -s /etc/munge/munge.key ]; then
    $SUDO dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none \
        || die "cannot write /etc/munge/munge.key"
fi
$SUDO chown -R munge:munge /etc/munge /run/munge /var/lib/munge /var/log/munge
$SUDO chmod 0700 /etc/munge; $SUDO chmod 0400 /etc/munge/munge.key; $SUDO chmod 0755 /run/munge
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    $SUDO rm -f /run/munge/munged.pid
    if command -v runuser >/dev/null 2>&1 && [ -z "$SUDO" ]; then runuser -u munge -- munged --force
    else $SUDO -u munge munged --force; fi || die "munged failed to start (see /var/log/munge/munged.log)"
    for _ in $(seq 20); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.5; done
    munge -n 2>/dev/null | unmunge >/dev/null 2>&1 || die "munge does not work after starting munged"
fi

# 3. slurm.conf (rewritten each time; the daemons are restarted only if it changed).
CPUS="$(nproc)"
MEM_MB="$(awk '/MemTotal/ {print int($2/1024)}' /proc/meminfo)"
REAL_MB=$(( MEM_MB * 9 / 10 ))
[ "$REAL_MB" -gt 256 ] || die "cannot read the machine's memory from /proc/meminfo"
$SUDO mkdir -p "$CONF_DIR" "$LOG_DIR" "$STATE_DIR" "$SPOOL_DIR"
tmp="$(mktemp)"
cat >"$tmp" <<EOF
# Written by esopt scripts/start_slurm.sh: single-node Slurm (no accounting daemon).
ClusterName=esopt
SlurmctldHost=$HOST
AuthType=auth/munge
CryptoType=crypto/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SlurmUser=root
SlurmdUser=root
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
StateSaveLocation=$STATE_DIR
SlurmdSpoolDir=$SPOOL_DIR
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=$LOG_DIR/slurmctld.log
SlurmdLogFile=$LOG_DIR/slurmd.log
SlurmctldTimeout=30
SlurmdTimeout=60
InactiveLimit=0
MinJobAge=300
KillWait=10
Waittime=0
NodeName=$HOST CPUs=$CPUS RealMemory=$REAL_MB State=UNKNOWN
PartitionName=$PARTITION Nodes=$HOST Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
changed=1
if [ -f "$CONF" ] && cmp -s "$tmp" "$CONF"; then changed=0; fi
$SUDO install -m 0644 "$tmp" "$CONF"; rm -f "$tmp"

# 4. Daemons.
if [ "$changed" = 1 ]; then
    for d in slurmd slurmctld; do
        pidf="/run/$d.pid"
        if [ -s "$pidf" ] && kill -0 "$(cat "$pidf")" 2>/dev/null; then
            say "restarting $d (slurm.conf changed)"; $SUDO kill "$(cat "$pidf")"
        fi
    done
    for _ in $(seq 20); do running slurmctld || running slurmd || break; sleep 0.5; done
fi
running slurmctld || $SUDO slurmctld || die "slurmctld failed to start (see $LOG_DIR/slurmctld.log)"
running slurmd || $SUDO slurmd || die "slurmd failed to start (see $LOG_DIR/slurmd.log)"

# 5. Wait for the node (resume it if a previous run left it down or drained).
for i in $(seq $(( WAIT_S * 2 ))); do
    st="$(node_state)"
    case "$st" in
        idle|mix|alloc|comp) say "node $HOST up: $st, partition $PARTITION, CPUs=$CPUS RealMemory=${REAL_MB}M"; sinfo; exit 0 ;;
        down*|drain*|drng*|fail*) [ $((i % 4)) = 0 ] && $SUDO scontrol update NodeName="$HOST" State=RESUME >/dev/null 2>&1 ;;
    esac
    sleep 0.5
done
die "node $HOST not idle after ${WAIT_S}s (state '$(node_state)'); see $LOG_DIR/slurmctld.log and $LOG_DIR/slurmd.log"
