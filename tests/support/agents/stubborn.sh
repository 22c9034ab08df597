#!/usr/bin/env bash
# A badly behaved agent: it ignores SIGTERM, leaves a daemon in a new session and an orphan.
trap '' TERM
setsid sleep 1000 &
( trap '' TERM; exec sleep 1001 ) &
bash -c 'sleep 1002 & disown; exit 0' &
echo "started children"
sleep 1003
