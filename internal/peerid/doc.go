// Package peerid names metatree members in X.509 certificates and keeps a
// TLS configuration current with its files.
//
// A member's certificate carries the URI SAN metatree://node/<id>; the
// journal, heartbeat and image handlers read it from the request's verified
// chain ([FromRequest]) and refuse a peer that speaks for another id.
// [Files] serves a certificate, key and CA read from disk and re-read when
// they change, so that a rotated certificate takes effect on the next
// handshake without a restart (etcd re-reads its files per handshake too).
package peerid
