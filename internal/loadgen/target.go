package loadgen

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"time"
)

// ErrNotLoopback is wrapped by the error CheckTarget returns for a target
// outside the loopback network, and by dial errors for an address that
// turns out to be outside it.
var ErrNotLoopback = errors.New("not a loopback address")

// CheckTarget parses target, the server's base URL, and returns it
// normalised: no trailing slash and no trailing "/v1" (the request paths
// add it). Unless allowRemote, the host must be "localhost", an address in
// 127.0.0.0/8 or ::1; the error for any other host wraps ErrNotLoopback.
func CheckTarget(target string, allowRemote bool) (*url.URL, error) {
	u, err := url.Parse(target)
	if err != nil {
		// Neither the target nor url.Error (which quotes it) is repeated:
		// a URL that does not parse cannot be redacted, and it may hold a
		// password.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("target is not a valid URL: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("target %q: scheme must be http or https, like http://127.0.0.1:8080", u.Redacted())
	}
	if u.Hostname() == "" {
		return nil, fmt.Errorf("target %q has no host", u.Redacted())
	}
	if u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		// Redacted: a password in the URL must not reach the terminal.
		return nil, fmt.Errorf("target %q: give only scheme, host, port and path; no user, query or fragment", u.Redacted())
	}
	if !allowRemote && !isLoopbackHost(u.Hostname()) {
		return nil, fmt.Errorf("target host %q: %w; load may only be sent to 127.0.0.0/8, ::1 or localhost", u.Hostname(), ErrNotLoopback)
	}
	u.Path = strings.TrimSuffix(strings.TrimRight(u.Path, "/"), "/v1")
	u.RawPath = ""
	return u, nil
}

func isLoopbackHost(host string) bool {
	if strings.EqualFold(strings.TrimSuffix(host, "."), "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// NewClient returns the HTTP client for a run. Unless allowRemote, its
// dialer refuses any address outside the loopback network, whatever name
// resolved to it, and it uses no proxy. It never follows redirects: a 3xx
// counts as a failed request, so it can neither leave loopback nor hide a
// misconfigured target.
func NewClient(allowRemote bool, conns int) *http.Client {
	d := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	tr := &http.Transport{
		DialContext:         d.DialContext,
		MaxIdleConns:        conns,
		MaxIdleConnsPerHost: conns,
		IdleConnTimeout:     90 * time.Second,
		// Compression would make the transport buffer the event stream
		// through a decompressor; streams are small anyway.
		DisableCompression: true,
	}
	if allowRemote {
		tr.Proxy = http.ProxyFromEnvironment
	} else {
		d.Control = func(network, address string, _ syscall.RawConn) error {
			host, _, err := net.SplitHostPort(address)
			if err != nil {
				return err
			}
			if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
				return fmt.Errorf("dial %s: %w", address, ErrNotLoopback)
			}
			return nil
		}
	}
	return &http.Client{
		Transport:     tr,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// DiscoverModel returns the id of the first model that GET /v1/models on
// base lists.
func DiscoverModel(ctx context.Context, client *http.Client, base *url.URL, apiKey string) (string, error) {
	u := base.JoinPath("v1", "models").String()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return "", err
	}
	if apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+apiKey)
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", fmt.Errorf("listing models: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return "", fmt.Errorf("listing models: GET %s: reading body: %w", u, err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("listing models: GET %s: %s: %s", u, resp.Status, snippet(body))
	}
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return "", fmt.Errorf("listing models: GET %s: not a model list: %w", u, err)
	}
	if len(list.Data) == 0 || list.Data[0].ID == "" {
		return "", fmt.Errorf("listing models: GET %s lists no model; name one explicitly", u)
	}
	return list.Data[0].ID, nil
}

// snippet shortens a response body for an error message.
func snippet(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 200 {
		s = strings.ToValidUTF8(s[:200], "") + "…"
	}
	return s
}
