#!/usr/bin/dash
# rdma-guest-agent: runs one command per connection for the host (see tests/support/guest.py).
# Protocol: the host sends one line, the command in base64, and closes its half. The agent
# runs it with sh, stdout and stderr merged, and ends with a line
# "RDMA-GUEST-RC <exit status>". Commands run in /tmp as root.
read -r encoded || exit 0
cd /tmp || exit 1
script=$(mktemp /tmp/agent-cmd.XXXXXX)
echo "$encoded" | base64 -d >"$script"
dash "$script" 2>&1 </dev/null
rc=$?
rm -f "$script"
echo "RDMA-GUEST-RC $rc"
