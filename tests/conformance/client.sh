#!/bin/sh
# The client under test for the MCP conformance suite's client scenarios (tests/remote.rs):
# the suite starts a server and runs this with its URL as the last argument and the scenario in
# $MCP_CONFORMANCE_SCENARIO. We configure that URL as a remote server and let a script reach
# its tools through `mcp-code-mode run`, as a user's script would. $MCP_CODE_MODE_BIN is our
# binary; OAuth scenarios sign in through $BROWSER (set by the test), with tokens kept under
# $XDG_CONFIG_HOME.
set -eu
for url; do :; done
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
oauth=""
case "${MCP_CONFORMANCE_SCENARIO:-}" in
  auth/client-credentials-basic)
    # The suite hands the client it registered in $MCP_CONFORMANCE_CONTEXT (JSON).
    id=$(printf '%s' "$MCP_CONFORMANCE_CONTEXT" | python3 -c 'import json,sys; print(json.load(sys.stdin)["client_id"])')
    secret=$(printf '%s' "$MCP_CONFORMANCE_CONTEXT" | python3 -c 'import json,sys; print(json.load(sys.stdin)["client_secret"])')
    oauth=", \"oauth\": {\"grant\": \"client_credentials\", \"client_id\": \"$id\", \"client_secret\": \"$secret\"}" ;;
  auth/pre-registration)
    id=$(printf '%s' "$MCP_CONFORMANCE_CONTEXT" | python3 -c 'import json,sys; print(json.load(sys.stdin)["client_id"])')
    secret=$(printf '%s' "$MCP_CONFORMANCE_CONTEXT" | python3 -c 'import json,sys; print(json.load(sys.stdin)["client_secret"])')
    oauth=", \"oauth\": {\"client_id\": \"$id\", \"client_secret\": \"$secret\"}" ;;
  auth/basic-cimd)
    # The URL where a user would host this client's metadata document (the suite's own).
    oauth=', "oauth": {"client_metadata_url": "https://conformance-test.local/client-metadata.json"}' ;;
esac
printf '{"servers": {"conformance": {"url": "%s", "timeout_s": 20%s}}}\n' "$url" "$oauth" > "$dir/servers.json"
case "${MCP_CONFORMANCE_SCENARIO:-}" in
  tools_call) script='print(tools.conformance.add_numbers(a=2, b=3))' ;;
  sse-retry) script='print(tools.conformance.test_reconnection())' ;;
  auth/*) script='print(tools.conformance.test_tool())' ;;
  *) script='print(sorted(dir(tools.conformance)))' ;;
esac
printf '%s\n' "$script" | "$MCP_CODE_MODE_BIN" run --config "$dir/servers.json" -
