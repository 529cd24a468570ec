#!/usr/bin/env bash
# Installs the message brokers the transport plugin tests run against,
# nats-server (with JetStream), redis-server, rabbitmq-server and mosquitto,
# from Debian's packages when they are missing. It only installs: the tests
# start their own servers on random loopback ports, so nothing is started here, and the services the
# packages register are not needed.
#
#   .ci/brokers.sh
set -euo pipefail

log() { echo "brokers.sh: $*" >&2; }

have() {
	command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ] || [ -x "/usr/bin/$1" ]
}

missing=()
have nats-server || missing+=(nats-server)
have redis-server || missing+=(redis-server)
# The tests run the script Debian's /usr/sbin wrapper calls, as root, with
# their own node name, ports, data and epmd (harness/rabbitmqtest).
have rabbitmq-server || missing+=(rabbitmq-server)
# mosquitto_passwd, for the password file of the credentials tests, comes
# with the broker.
have mosquitto || missing+=(mosquitto)

if [ ${#missing[@]} -gt 0 ]; then
	log "installing ${missing[*]} from Debian's packages"
	export DEBIAN_FRONTEND=noninteractive
	# The packages' own services are not wanted: they would hold the
	# default ports and outlive the run. Where no policy says otherwise,
	# one is put in place for the install and taken away after it.
	policy=/usr/sbin/policy-rc.d
	if [ ! -e "$policy" ]; then
		printf '#!/bin/sh\nexit 101\n' >"$policy"
		chmod 755 "$policy"
		trap 'rm -f "$policy"' EXIT
	fi
	apt-get update -qq >&2
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi

for b in nats-server redis-server rabbitmq-server mosquitto mosquitto_passwd; do
	have "$b" || { log "$b is still missing after the install"; exit 1; }
done
nats=$(command -v nats-server || echo /usr/sbin/nats-server)
redis=$(command -v redis-server || echo /usr/bin/redis-server)
rabbitmq=$(dpkg-query -W -f '${Version}' rabbitmq-server 2>/dev/null || echo unknown)
mosquitto=$(dpkg-query -W -f '${Version}' mosquitto 2>/dev/null || echo unknown)
log "$("$nats" --version), $("$redis" --version | awk '{print $1, $2, $3}'), rabbitmq-server $rabbitmq, mosquitto $mosquitto"
