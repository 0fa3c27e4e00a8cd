// Package peerauth authenticates the processes of a disaggregated
// deployment to each other: prefill servers, decode servers and the
// router. It turns config.Peers into listeners, dialers, an HTTP
// middleware and an HTTP client, in one of two modes:
//
//   - mtls: mutual TLS against the operator's CA. Every connection proves
//     both ends hold a certificate the CA signed, and every node
//     certificate names the one role its holder may act as (roles.go: a
//     URI SAN bulkhead-role:router, :prefill or :decode, which IssueNode
//     and `bulkhead certs --role` put in). Each endpoint accepts only the
//     roles that call it: decode's and prefill's control endpoints only
//     the router, decode's KV listener only prefill servers; and each
//     client checks the role of the server it reached. A certificate of
//     another role, or of none, is refused (403, or a failed handshake)
//     with an error naming the role presented and the role required.
//   - psk: a pre-shared key, as TLS 1.3 too: every holder of the key
//     derives the same Ed25519 key pair from it, and each end requires the
//     other's certificate to carry that public key (psk.go). The key never
//     crosses the network, and every connection is encrypted and
//     integrity-protected as under mtls. But psk gives no role separation:
//     every holder has the same key and certificate, so a prefill server
//     is accepted wherever the router is and the other way round; a
//     deployment that wants roles enforced uses mtls.
//
// It owns peer credentials, roles and the handshakes. It must never fall
// back to an unauthenticated connection: a failed handshake closes the
// connection and says why, and a role without peer auth configured
// refuses to start. Under mtls it must never accept a peer for a role its
// certificate does not name, nor open for a role without one.
package peerauth
