'use strict';

// A self-signed X.509 certificate for go-plugin's AutoMTLS, made with
// Node's own crypto and nothing else.
//
// Node can make and use keys (crypto.generateKeyPairSync, crypto.sign) but
// has no API that writes a certificate. Rather than depend on an openssl
// binary at run time, or on a large X.509 package, this file writes the
// few DER structures a certificate needs (RFC 5280): about a hundred lines,
// with nothing to install and nothing to go wrong on a machine without
// openssl. What the certificate must hold is what go-plugin's own
// generateCert puts in (mtls.go): the name "localhost" as a DNS subject
// alternative name (the host checks it: its TLS config has ServerName
// "localhost"), CA:true and keyCertSign (the host trusts this very
// certificate as its root), and the serverAuth and clientAuth key usages.

const crypto = require('node:crypto');

// DER: tag, length, content.
function tlv(tag, content) {
  const n = content.length;
  let len;
  if (n < 0x80) {
    len = Buffer.from([n]);
  } else {
    const bytes = [];
    for (let v = n; v > 0; v = Math.floor(v / 256)) bytes.unshift(v & 0xff);
    len = Buffer.from([0x80 | bytes.length, ...bytes]);
  }
  return Buffer.concat([Buffer.from([tag]), len, content]);
}

const seq = (...parts) => tlv(0x30, Buffer.concat(parts));
const set = (...parts) => tlv(0x31, Buffer.concat(parts));
const explicit = (n, inner) => tlv(0xa0 + n, inner);
const octets = (b) => tlv(0x04, b);
const utf8 = (s) => tlv(0x0c, Buffer.from(s, 'utf8'));
const bool = (v) => tlv(0x01, Buffer.from([v ? 0xff : 0x00]));
// A BIT STRING of whole bytes: no unused bits.
const bits = (b) => tlv(0x03, Buffer.concat([Buffer.from([0]), b]));

// A non-negative INTEGER from its big-endian bytes: no leading zero bytes,
// except one that keeps the top bit clear (DER integers are signed).
function uint(b) {
  let i = 0;
  while (i < b.length - 1 && b[i] === 0) i++;
  b = b.subarray(i);
  if (b[0] & 0x80) b = Buffer.concat([Buffer.from([0]), b]);
  return tlv(0x02, b);
}

function oid(dotted) {
  const arcs = dotted.split('.').map(Number);
  const out = [40 * arcs[0] + arcs[1]];
  for (const arc of arcs.slice(2)) {
    const base128 = [arc & 0x7f];
    for (let v = Math.floor(arc / 128); v > 0; v = Math.floor(v / 128)) base128.unshift(0x80 | (v & 0x7f));
    out.push(...base128);
  }
  return tlv(0x06, Buffer.from(out));
}

// RFC 5280 4.1.2.5: UTCTime through 2049, GeneralizedTime from 2050.
function time(d) {
  const iso = d.toISOString(); // YYYY-MM-DDTHH:MM:SS.sssZ
  const digits = iso.slice(0, 19).replace(/[-T:]/g, '') + 'Z';
  return d.getUTCFullYear() < 2050 ? tlv(0x17, Buffer.from(digits.slice(2))) : tlv(0x18, Buffer.from(digits));
}

const OID = {
  ecdsaWithSHA256: '1.2.840.10045.4.3.2',
  organization: '2.5.4.10',
  commonName: '2.5.4.3',
  basicConstraints: '2.5.29.19',
  keyUsage: '2.5.29.15',
  extKeyUsage: '2.5.29.37',
  subjectAltName: '2.5.29.17',
  serverAuth: '1.3.6.1.5.5.7.3.1',
  clientAuth: '1.3.6.1.5.5.7.3.2',
};

function extension(id, critical, value) {
  return critical ? seq(oid(id), bool(true), octets(value)) : seq(oid(id), octets(value));
}

// selfSignedCert makes a P-256 key and a certificate for "localhost"
// signed by it, valid from a minute ago (clocks differ a little) for a
// year: long enough for any plugin process, which gets a new one at every
// start. It returns the certificate as DER and PEM and the key as PEM.
function selfSignedCert() {
  const { publicKey, privateKey } = crypto.generateKeyPairSync('ec', { namedCurve: 'P-256' });
  const name = seq(
    set(seq(oid(OID.organization), utf8('Hymical transport plugin'))),
    set(seq(oid(OID.commonName), utf8('localhost'))),
  );
  const now = Date.now();
  const sigAlg = seq(oid(OID.ecdsaWithSHA256));
  // keyUsage digitalSignature (bit 0) and keyCertSign (bit 5): 1000 0100,
  // the two low zero bits unused, as DER requires for a named bit list.
  const keyUsage = tlv(0x03, Buffer.from([2, 0x84]));
  const tbs = seq(
    explicit(0, uint(Buffer.from([2]))), // version 3
    uint(crypto.randomBytes(16)), // serial number
    sigAlg,
    name, // issuer: itself
    seq(time(new Date(now - 60e3)), time(new Date(now + 365 * 24 * 3600e3))),
    name, // subject
    publicKey.export({ type: 'spki', format: 'der' }),
    explicit(3, seq(
      extension(OID.basicConstraints, true, seq(bool(true))),
      extension(OID.keyUsage, true, keyUsage),
      extension(OID.extKeyUsage, false, seq(oid(OID.serverAuth), oid(OID.clientAuth))),
      // [2] IMPLICIT IA5String: a dNSName.
      extension(OID.subjectAltName, false, seq(tlv(0x82, Buffer.from('localhost')))),
    )),
  );
  // Node signs ECDSA as the DER Ecdsa-Sig-Value X.509 wants.
  const signature = crypto.sign('sha256', tbs, privateKey);
  const der = seq(tbs, sigAlg, bits(signature));
  const b64 = der.toString('base64');
  const certPEM = `-----BEGIN CERTIFICATE-----\n${b64.match(/.{1,64}/g).join('\n')}\n-----END CERTIFICATE-----\n`;
  const keyPEM = privateKey.export({ type: 'pkcs8', format: 'pem' });
  return { der, certPEM, keyPEM };
}

module.exports = { selfSignedCert };
