#!/usr/bin/env bash
# Installs the independent Ed25519 implementations the v1a signature tests
# check Hymical's signatures against (sdk/webhook/interop_v1a_test.go):
# OpenSSL's command line and Node, from Debian's packages when they are
# missing; and npm, with which the Node.js plugin example's tests install
# its dependencies (examples/node-transport) and TestOpenAPIGeneratedClient
# installs the pinned TypeScript client generator of
# server/api/testdata/tsclient, each with npm ci from the npm registry; and
# Debian's python3-grpcio, python3-protobuf, python3-cryptography and
# python3-grpc-tools, on which the Python plugin example runs and its stubs
# are generated (examples/python-transport).
# Under CI=true those tests fail without them.
#
#   .ci/tools.sh
set -euo pipefail

log() { echo "tools.sh: $*" >&2; }

missing=()
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
# The Python plugin runs on Debian's interpreter, where these install.
if ! /usr/bin/python3 -c 'import grpc, google.protobuf, cryptography, grpc_tools' >/dev/null 2>&1; then
	missing+=(python3 python3-grpcio python3-protobuf python3-cryptography python3-grpc-tools)
fi

if [ ${#missing[@]} -gt 0 ]; then
	log "installing ${missing[*]} from Debian's packages"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq >&2
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi

for tool in openssl node npm; do
	command -v "$tool" >/dev/null 2>&1 || { log "$tool is still missing after the install"; exit 1; }
done
/usr/bin/python3 -c 'import grpc, google.protobuf, cryptography, grpc_tools' || { log "python3-grpcio, python3-protobuf, python3-cryptography or python3-grpc-tools is still missing after the install"; exit 1; }
log "$(openssl version), node $(node --version), npm $(npm --version)"
