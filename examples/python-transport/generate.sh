#!/bin/sh
# Regenerates gen/ from the protocol files with Debian's python3-grpc-tools
# (apt-get install python3-grpc-tools). TestStubsAreGenerated fails when
# gen/ differs from what this writes.
set -eu
cd "$(dirname "$0")"
/usr/bin/python3 -m grpc_tools.protoc \
	-I../../sdk/transport/proto -I../../sdk/node-plugin/proto \
	-I/usr/lib/python3/dist-packages/grpc_tools/_proto \
	--python_out="${1:-gen}" --grpc_python_out="${1:-gen}" \
	transport.proto health.proto goplugin.proto
