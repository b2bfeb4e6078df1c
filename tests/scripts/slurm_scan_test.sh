#!/usr/bin/env bash
# The Slurm array job of docs/scan.md ("As a Slurm array job"), run for real on a single-node
# Slurm that this script starts and stops itself (Debian's munged, slurmctld and slurmd, with a
# throwaway configuration in a temporary directory):
#   1. the job script and the merge command are taken from docs/scan.md, and only the model's path
#      is changed (headscope-cli is found on PATH, the input and outputs are the relative paths the
#      script names, in the directory it is submitted from);
#   2. the array is submitted; while shard K is scanning, its batch shell is sent SIGTERM with
#      `scancel --signal=TERM --batch` (what `#SBATCH --signal=B:TERM@60` does before the limit);
#      its output must then be marked "complete": false, and the merge must refuse it;
#   3. that task alone is resubmitted (`sbatch --array=K`), which must resume it: the resumed
#      shard must equal an uninterrupted run of the same shard byte for byte;
#   4. the documented merge command runs, and its output must equal one process over the same file
#      (counts, bad lines and settings equal; every mean and standard deviation to 1e-9 relative).
# Skips (exit 77), saying why, when not root, when the Slurm or munge programs are missing
# (tools/dev/deps.sh --with-test-tools installs them) or when the daemons cannot start (some
# containers). Every daemon it started is stopped on exit.
# Usage: slurm_scan_test.sh HEADSCOPE_CLI SOURCE_DIR WORK_DIR
set -euo pipefail
cli=$(realpath "$1")
src=$(realpath "$2")
work=$3
export PATH=/usr/sbin:/sbin:$PATH
skip() {
  echo "SKIP: $*"
  exit 77
}
fail() {
  echo "FAIL: $*" >&2
  exit 1
}

[[ $(id -u) -eq 0 ]] || skip "needs root to start munged, slurmctld and slurmd (./test.sh runs as root in CI)"
for tool in munged munge unmunge slurmctld slurmd sbatch squeue scancel sinfo scontrol python3; do
  command -v "$tool" >/dev/null ||
    skip "$tool is not installed (tools/dev/deps.sh --with-test-tools installs slurmctld, slurmd, slurm-client and munge)"
done

# --- The job script and the merge command, as docs/scan.md has them -----------------------------
doc=$src/docs/scan.md
model=$src/resources/models/headscope-tiny
# The N-th ```sh block of the section "### As a Slurm array job".
doc_block() {
  awk -v n="$1" '
    /^### As a Slurm array job$/ { in_section = 1; next }
    in_section && /^##/ { exit }
    in_section && /^```sh$/ { if (++k == n) on = 1; next }
    on && /^```$/ { exit }
    on { print }' "$doc"
}
job_script=$(doc_block 1)
merge_command=$(doc_block 2)
[[ $job_script == '#!/bin/bash'* ]] || fail "no job script found under \"### As a Slurm array job\" in $doc"
[[ $merge_command == *'headscope-cli merge'* ]] || fail "no merge command found after the job script in $doc"
# The only change: the model's path (the documented one is an example).
doc_model=/models/gpt2
[[ $job_script == *"--model $doc_model "* ]] ||
  fail "the job script in $doc no longer reads --model $doc_model; update this test's substitution"
job_script=${job_script//"--model $doc_model "/"--model $model "}

# --- Daemons ---------------------------------------------------------------------------------
tmp=$(mktemp -d /tmp/headscope-slurm.XXXXXX)
chmod 700 "$tmp"
daemon_pids=()
slurm_up=""
show_logs() {
  for f in "$tmp"/*.log "$work"/slurm-*.out; do
    [[ -f $f ]] || continue
    echo "--- $f (last lines)"
    tail -n 25 "$f"
  done
}
our_stepds() {
  local p
  for p in /proc/[0-9]*; do
    [[ $(cat "$p/comm" 2>/dev/null) == slurmstepd ]] || continue
    tr '\0' '\n' <"$p/environ" 2>/dev/null | grep -qx "SLURM_CONF=$tmp/slurm.conf" && echo "${p#/proc/}"
  done
}
cleanup() {
  local status=$?
  trap - EXIT INT TERM
  if [[ -n $slurm_up ]]; then
    # Jobs first, so that no slurmstepd outlives its slurmd.
    scancel --quiet --user=root 2>/dev/null || true
    for _ in $(seq 1 100); do
      [[ -z $(squeue -h -o %i 2>/dev/null) ]] && break
      sleep 0.1
    done
    # Then their slurmstepd, which slurmd started with its environment (this SLURM_CONF).
    for _ in $(seq 1 100); do
      [[ -z $(our_stepds) ]] && break
      sleep 0.1
    done
  fi
  local i pid
  for ((i = ${#daemon_pids[@]} - 1; i >= 0; i--)); do
    pid=${daemon_pids[i]}
    kill -TERM "$pid" 2>/dev/null || continue
    for _ in $(seq 1 50); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  for pid in $(our_stepds); do kill -KILL "$pid" 2>/dev/null || true; done
  ((status == 0 || status == 77)) || show_logs >&2
  rm -rf "$tmp"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

# munge: a key of its own and a socket in $tmp (not the system's /run/munge).
dd if=/dev/urandom of="$tmp/munge.key" bs=1024 count=1 status=none
chmod 400 "$tmp/munge.key"
socket=$tmp/munge.socket
munged --foreground --force --key-file="$tmp/munge.key" --socket="$socket" \
  --pid-file="$tmp/munged.pid" --log-file="$tmp/munged.log" --seed-file="$tmp/munged.seed" \
  >"$tmp/munged.stderr.log" 2>&1 &
daemon_pids+=($!)
for _ in $(seq 1 100); do
  munge -n -S "$socket" 2>/dev/null | unmunge -S "$socket" >/dev/null 2>&1 && break
  sleep 0.1
done
if ! munge -n -S "$socket" 2>/dev/null | unmunge -S "$socket" >/dev/null 2>&1; then
  show_logs
  skip "munged could not start here (logs above)"
fi

# Two free TCP ports for slurmctld and slurmd, so that no system Slurm is disturbed.
read -r ctld_port slurmd_port < <(python3 -c '
import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*(x.getsockname()[1] for x in s))')
host=$(hostname -s)
node=headscope-node
export SLURM_CONF=$tmp/slurm.conf
mkdir -p "$tmp/state" "$tmp/spool"
# One node of 2 CPUs (the documented --cpus-per-task=2: one task at a time), no cgroups, no
# accounting; config_overrides keeps slurmd from draining the node where the host has another count.
cat >"$SLURM_CONF" <<EOF
ClusterName=headscope-test
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$socket
StateSaveLocation=$tmp/state
SlurmdSpoolDir=$tmp/spool
SlurmctldPidFile=$tmp/slurmctld.pid
SlurmdPidFile=$tmp/slurmd.pid
SlurmctldLogFile=$tmp/slurmctld.log
SlurmdLogFile=$tmp/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
MpiDefault=none
SwitchType=switch/none
ReturnToService=2
SlurmdParameters=config_overrides
MailProg=/bin/true
MinJobAge=600
NodeName=$node NodeAddr=127.0.0.1 NodeHostname=$host CPUs=2 State=UNKNOWN
PartitionName=test Nodes=$node Default=YES MaxTime=INFINITE State=UP
EOF
slurmctld -D -c -f "$SLURM_CONF" >"$tmp/slurmctld.stderr.log" 2>&1 &
daemon_pids+=($!)
slurmd -D -f "$SLURM_CONF" -N "$node" >"$tmp/slurmd.stderr.log" 2>&1 &
daemon_pids+=($!)
slurm_up=1
state=""
for _ in $(seq 1 300); do
  state=$(sinfo -h -n "$node" -o %T 2>/dev/null || true)
  [[ $state == idle ]] && break
  sleep 0.1
done
if [[ $state != idle ]]; then
  show_logs
  skip "slurmctld and slurmd could not bring up a node here (state '${state:-none}'; logs above)"
fi
# A job that does nothing, to tell a host where slurmd cannot launch jobs (skip) from a failure.
smoke=$(sbatch --parsable --chdir="$tmp" --output=/dev/null --wrap=true 2>"$tmp/smoke.log") || smoke=""
smoke_state=""
for _ in $(seq 1 300); do
  [[ -n $smoke ]] || break
  smoke_state=$(scontrol show job "$smoke" 2>/dev/null | tr ' ' '\n' | sed -n 's/^JobState=//p')
  [[ $smoke_state == COMPLETED || $smoke_state == FAILED || $smoke_state == CANCELLED ]] && break
  sleep 0.1
done
if [[ $smoke_state != COMPLETED ]]; then
  show_logs
  skip "this single-node Slurm cannot run a job here (a job of 'true' ended '${smoke_state:-not submitted}': $(cat "$tmp/smoke.log"); logs above)"
fi
echo "single-node Slurm up after ${SECONDS}s: $(sinfo -h -o '%P %D %c %T'), a first job run"

# --- The data set, and one process over it ---------------------------------------------------
rm -rf "$work"
mkdir -p "$work/bin"
cd "$work"
ln -s "$cli" bin/headscope-cli
export PATH=$work/bin:$PATH
# 400 JSON Lines rows of 100-300 words (many cut at --max-tokens 256, so every shard scans for a
# few seconds and can be signalled while it runs), with an empty line, a line of invalid UTF-8 and
# one of bad JSON (bad lines, counted by whichever shard reads them).
python3 - <<'PY'
import json, random
random.seed(27)
words = ("the cat sat on the mat and the dog saw her too Tom and Lily went to the shop "
         "once upon a time there was a girl who liked the number seven").split()
with open("prompts.jsonl", "wb") as f:
    for i in range(400):
        if i == 101: f.write(b"\n")
        elif i == 202: f.write(b'{"text": "\xff\xfe not text"}\n')
        elif i == 303: f.write(b'{"text": "unterminated\n')
        else:
            text = " ".join(random.choice(words) for _ in range(random.randint(100, 300)))
            f.write((json.dumps({"text": text}) + "\n").encode())
PY
printf '%s\n' "$job_script" >scan.sh
t0=$SECONDS
headscope-cli scan --model "$model" --input prompts.jsonl --max-tokens 256 --threads 2 -o one.json 2>/dev/null
echo "one process: $((SECONDS - t0))s"

# --- The array, one task signalled while it scans --------------------------------------------
K=1
wait_job() { # JOBID TIMEOUT_S: until the job (every task of an array) has left the queue
  local i
  for ((i = 0; i < $2 * 10; i++)); do
    [[ -z $(squeue -h -j "$1" -o %i 2>/dev/null) ]] && return 0
    sleep 0.1
  done
  fail "job $1 still queued or running after $2 s: $(squeue -h -j "$1" -o '%i %T %R')"
}
job_field() { # JOBID FIELD: from scontrol show job (kept for MinJobAge)
  scontrol show job "$1" | tr ' ' '\n' | sed -n "s/^$2=//p" | head -n 1
}
# The process of task K once it is headscope-cli itself (exec'd from the batch shell) and has
# installed its SIGTERM handler (bit 15 of SigCgt), so the signal cannot arrive too early.
scanning_pid() { # ARRAY_JOB_ID TASK_ID
  local p
  for p in /proc/[0-9]*; do
    [[ $(readlink "$p/exe" 2>/dev/null) == "$cli" ]] || continue
    tr '\0' '\n' <"$p/environ" 2>/dev/null | grep -qx "SLURM_ARRAY_JOB_ID=$1" || continue
    tr '\0' '\n' <"$p/environ" 2>/dev/null | grep -qx "SLURM_ARRAY_TASK_ID=$2" || continue
    local caught
    caught=$(sed -n 's/^SigCgt:[[:space:]]*//p' "$p/status" 2>/dev/null) || continue
    (((16#$caught >> 14) & 1)) || continue
    echo "${p#/proc/}"
    return 0
  done
  return 1
}
array=$(sbatch --parsable scan.sh)
array=${array%%;*}
echo "submitted the documented array job: $array ($(sed -n 's/^#SBATCH --array=\([^ ]*\).*/\1/p' scan.sh))"
# Slurm 22.05 may answer "try again later" for a task that has just started, sometimes after
# delivering the signal all the same: wait for RUNNING too, judge by whether the scan stops, and
# send again while it scans on (a second SIGTERM changes nothing).
pid=""
for _ in $(seq 1 2400); do
  if [[ $(squeue -h -j "${array}_$K" -o %T 2>/dev/null) == RUNNING ]] && pid=$(scanning_pid "$array" "$K"); then
    break
  fi
  pid=""
  [[ -z $(squeue -h -j "$array" -o %i 2>/dev/null) ]] && break
  sleep 0.05
done
[[ -n $pid ]] || fail "task ${array}_$K was never seen scanning (finished already, or never started)"
parent=$(ps -o comm= -p "$(ps -o ppid= -p "$pid" 2>/dev/null | tr -d ' ')" 2>/dev/null || true)
for _ in $(seq 1 20); do
  scancel --signal=TERM --batch "${array}_$K" 2>>scancel.log || true
  for _ in $(seq 1 20); do
    kill -0 "$pid" 2>/dev/null || break 2
    sleep 0.1
  done
done
kill -0 "$pid" 2>/dev/null && fail "task ${array}_$K scans on after 20 scancel --signal=TERM --batch: $(cat scancel.log)"
echo "task ${array}_$K (headscope-cli pid $pid, parent ${parent:-gone}) sent SIGTERM through its batch shell"
wait_job "$array" 180
echo "task ${array}_$K: $(job_field "${array}_$K" JobState), exit $(job_field "${array}_$K" ExitCode)"
python3 - scan/shard*.json <<'PY'
import json, sys
for f in sys.argv[1:]:
    if "*" in f:
        print("  no shard output at all")
        break
    d = json.load(open(f))
    print(f"  {f}: {'complete' if d['complete'] else 'incomplete'}, {d['counts']}")
PY
python3 - "scan/shard$K.json" <<'PY'
import json, sys
import os
assert os.path.exists(sys.argv[1]), f"{sys.argv[1]} was not written: the SIGTERM did not reach headscope-cli"
d = json.load(open(sys.argv[1]))
assert d["complete"] is False, f"{sys.argv[1]} is not marked incomplete: the SIGTERM did not reach headscope-cli before its end"
assert d["counts"]["next_index"] < d["counts"]["input_indices"], d["counts"]
PY
if (bash -euo pipefail -c "$merge_command") >merge_refused.log 2>&1; then
  fail "the merge accepted an incomplete shard"
fi
echo "merge refuses the incomplete shard: $(tail -n 1 merge_refused.log)"

# --- That task alone, resubmitted ------------------------------------------------------------
again=$(sbatch --parsable --array="$K" scan.sh)
again=${again%%;*}
wait_job "$again" 120
state=$(job_field "${again}_$K" JobState)
echo "resubmitted as ${again}_$K: $state, exit $(job_field "${again}_$K" ExitCode)"
[[ $state == COMPLETED ]] || fail "the resubmitted task ended $state (slurm-${again}_$K.out below)"
shards=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["shard"]["count"])' "scan/shard$K.json")
headscope-cli scan --model "$model" --input prompts.jsonl --max-tokens 256 --threads 2 \
  --shard "$K/$shards" -o uninterrupted.json 2>/dev/null
cmp "scan/shard$K.json" uninterrupted.json ||
  fail "the resumed shard $K differs from an uninterrupted run of it"
echo "the resumed shard $K is byte for byte an uninterrupted run of shard $K/$shards"

# --- The documented merge, against one process -----------------------------------------------
bash -euo pipefail -c "$merge_command"
python3 - one.json scan.json "$shards" <<'PY'
import json, sys
one, merged = (json.load(open(p)) for p in sys.argv[1:3])
assert merged["complete"] is True
assert one["counts"] == merged["counts"], (one["counts"], merged["counts"])
assert one["bad_lines"] == merged["bad_lines"], (one["bad_lines"], merged["bad_lines"])
# Settings differ if the job script's options changed: keep this test's one-process command equal.
assert one["settings"] == merged["settings"], (one["settings"], merged["settings"])
assert one["counts"]["prompts"] == 397 and one["counts"]["bad_lines"] == 3, one["counts"]
worst = 0.0
def walk(a, b, path):
    global worst
    if isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            walk(x, y, f"{path}[{i}]")
    elif a is None or b is None:
        assert a is None and b is None, path
    else:
        rel = abs(a - b) / max(abs(a), abs(b), 1e-300)
        worst = max(worst, rel)
        assert rel <= 1e-9 or abs(a - b) <= 1e-12, f"{path}: {a} vs {b}"
assert one["aggregates"].keys() == merged["aggregates"].keys()
for name, agg in one["aggregates"].items():
    assert agg["count"] == merged["aggregates"][name]["count"], name
    for part in ("mean", "std"):
        walk(agg[part], merged["aggregates"][name][part], f"{name}.{part}")
print(f"{sys.argv[3]} Slurm shards (one signalled and resumed) merged equal one process: "
      f"{one['counts']['prompts']} prompts, {one['counts']['bad_lines']} bad lines, "
      f"max relative difference {worst:.3g}")
PY
echo "passed in ${SECONDS}s"
