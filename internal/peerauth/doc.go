// Package peerauth authenticates the processes of a disaggregated
// deployment to each other: prefill servers, decode servers and the
// router. It turns config.Peers into listeners, dialers, an HTTP
// middleware and an HTTP client, in one of two modes:
//
//   - mtls: mutual TLS against the operator's CA. Every connection proves
//     both ends hold a certificate the CA signed (MakeCerts makes a CA and
//     a node certificate for local use).
//   - psk: a pre-shared key, as TLS 1.3 too: every holder of the key
//     derives the same Ed25519 key pair from it, and each end requires the
//     other's certificate to carry that public key (psk.go). The key never
//     crosses the network, and every connection is encrypted and
//     integrity-protected as under mtls.
//
// It owns peer credentials and the handshakes. It must never fall back to
// an unauthenticated connection: a failed handshake closes the connection
// and says why, and a role without peer auth configured refuses to start.
package peerauth
