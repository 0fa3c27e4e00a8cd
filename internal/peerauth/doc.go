// Package peerauth authenticates the processes of a disaggregated
// deployment to each other: prefill servers, decode servers and the
// router. It turns config.Peers into listeners, dialers, an HTTP
// middleware and an HTTP client, in one of two modes:
//
//   - mtls: mutual TLS against the operator's CA. Every connection proves
//     both ends hold a certificate the CA signed (MakeCerts makes a CA and
//     a node certificate for local use).
//   - psk: a pre-shared key. HTTP requests carry it as a bearer token,
//     compared in constant time; a raw stream (the KV transfer) starts
//     with a mutual HMAC-SHA256 challenge–response, so neither side ever
//     sends the key and neither accepts a peer that cannot prove it. The
//     stream is authenticated but not encrypted.
//
// It owns peer credentials and the handshakes. It must never fall back to
// an unauthenticated connection: a failed handshake closes the connection
// and says why, and a role without peer auth configured refuses to start.
package peerauth
