#!/bin/sh
# signal_run.sh SIGNAL WAIT_FILE WAIT_LINES DELAY_S COMMAND...
# Start COMMAND in the background; once WAIT_FILE has at least WAIT_LINES lines (or, when
# WAIT_FILE is "-", after DELAY_S seconds) send it SIGNAL, wait for it and exit with its
# exit status (128 + n when the signal n ended it). Exits 98 when COMMAND ended before the
# signal could be sent, 99 when WAIT_FILE did not grow within a minute.
sig=$1 file=$2 lines=$3 delay=$4
shift 4
"$@" &
pid=$!
if [ "$file" = "-" ]; then
  sleep "$delay"
else
  tries=0
  while :; do
    n=$(cat "$file" 2>/dev/null | wc -l)
    [ "$n" -ge "$lines" ] && break
    tries=$((tries + 1))
    if [ "$tries" -gt 1200 ]; then
      kill -9 "$pid"
      echo "signal_run.sh: $file did not reach $lines lines" >&2
      exit 99
    fi
    sleep 0.05
  done
fi
if ! kill -s "$sig" "$pid" 2>/dev/null; then
  wait "$pid"
  echo "signal_run.sh: the command ended (status $?) before $sig was sent" >&2
  exit 98
fi
wait "$pid"
