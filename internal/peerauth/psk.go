package peerauth

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// The PSK stream handshake. Both ends, concurrently:
//
//  1. send pskMagic and a fresh 32-byte random nonce;
//  2. read the peer's magic and nonce;
//  3. send HMAC-SHA256(key, label || clientNonce || serverNonce), where
//     label names the sender's role ("client" or "server"), so one side's
//     proof can never be reflected back as the other's;
//  4. read the peer's proof and compare it in constant time.
//
// Each message is fixed-size and small enough to sit in a socket buffer,
// so writing before reading cannot deadlock. Fresh nonces on both sides
// make every proof single-use: a recorded handshake cannot be replayed.
const (
	pskMagic    = "BKPSK1\x00\x00"
	nonceBytes  = 32
	proofBytes  = sha256.Size
	labelClient = "bulkhead peer psk v1 client"
	labelServer = "bulkhead peer psk v1 server"
)

type pskListener struct {
	net.Listener
	key []byte
}

// Accept returns the next connection; it authenticates on first use.
func (l *pskListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return newPSKConn(c, l.key, false), nil
}

// pskConn is a connection that must pass the PSK handshake before any
// data moves through it.
type pskConn struct {
	net.Conn
	key    []byte
	client bool

	mu   sync.Mutex
	done bool
	err  error
}

func newPSKConn(c net.Conn, key []byte, client bool) *pskConn {
	return &pskConn{Conn: c, key: key, client: client}
}

func (c *pskConn) Read(b []byte) (int, error) {
	if err := c.handshakeContext(context.Background()); err != nil {
		return 0, err
	}
	return c.Conn.Read(b)
}

func (c *pskConn) Write(b []byte) (int, error) {
	if err := c.handshakeContext(context.Background()); err != nil {
		return 0, err
	}
	return c.Conn.Write(b)
}

// handshakeContext runs the handshake once; later calls return its result.
// A failure closes the connection.
func (c *pskConn) handshakeContext(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done {
		return c.err
	}
	c.done = true
	c.err = c.handshake(ctx)
	if c.err != nil {
		c.Conn.Close()
	}
	return c.err
}

func (c *pskConn) handshake(ctx context.Context) error {
	deadline := time.Now().Add(handshakeTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	if err := c.Conn.SetDeadline(deadline); err != nil {
		return fmt.Errorf("%w: %v", ErrAuth, err)
	}
	stop := context.AfterFunc(ctx, func() { c.Conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	fail := func(step string, err error) error {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return fmt.Errorf("%w: pre-shared key handshake with %v: %s: %v", ErrAuth, c.RemoteAddr(), step, err)
	}

	mine := make([]byte, len(pskMagic)+nonceBytes)
	copy(mine, pskMagic)
	if _, err := rand.Read(mine[len(pskMagic):]); err != nil {
		return fail("making a nonce", err)
	}
	if _, err := c.Conn.Write(mine); err != nil {
		return fail("sending the nonce", err)
	}
	theirs := make([]byte, len(mine))
	if _, err := io.ReadFull(c.Conn, theirs); err != nil {
		return fail("reading the peer's nonce", err)
	}
	if string(theirs[:len(pskMagic)]) != pskMagic {
		return fail("reading the peer's nonce", fmt.Errorf("the peer does not speak the bulkhead PSK handshake"))
	}
	cn, sn := mine[len(pskMagic):], theirs[len(pskMagic):]
	myLabel, peerLabel := labelClient, labelServer
	if !c.client {
		cn, sn = sn, cn
		myLabel, peerLabel = labelServer, labelClient
	}
	if _, err := c.Conn.Write(proof(c.key, myLabel, cn, sn)); err != nil {
		return fail("sending the proof", err)
	}
	got := make([]byte, proofBytes)
	if _, err := io.ReadFull(c.Conn, got); err != nil {
		return fail("reading the peer's proof", err)
	}
	if !hmac.Equal(got, proof(c.key, peerLabel, cn, sn)) {
		return fail("checking the peer's proof", fmt.Errorf("the peer does not hold this pre-shared key"))
	}
	if err := c.Conn.SetDeadline(time.Time{}); err != nil {
		return fail("clearing the deadline", err)
	}
	return nil
}

func proof(key []byte, label string, clientNonce, serverNonce []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(label))
	m.Write(clientNonce)
	m.Write(serverNonce)
	return m.Sum(nil)
}
