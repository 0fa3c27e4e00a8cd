package api

import (
	"encoding/json"
	"net/http"

	"github.com/bulkhead-llm/bulkhead/internal/errkind"
)

// Codes that select a status other than their kind's (see statusOf).
const (
	codeTooLarge         = "request_too_large"
	codeMethodNotAllowed = "method_not_allowed"
)

// statusOf is the one place an error becomes an HTTP status and an OpenAI
// error type. Every failure the server reports goes through it.
func statusOf(e *errkind.Error) (status int, typ string) {
	switch e.Kind {
	case errkind.BadInput:
		switch e.Code {
		case codeTooLarge:
			return http.StatusRequestEntityTooLarge, "invalid_request_error"
		case codeMethodNotAllowed:
			return http.StatusMethodNotAllowed, "invalid_request_error"
		}
		return http.StatusBadRequest, "invalid_request_error"
	case errkind.Auth:
		return http.StatusUnauthorized, "authentication_error"
	case errkind.NotFound:
		return http.StatusNotFound, "not_found_error"
	case errkind.Quota:
		return http.StatusTooManyRequests, "rate_limit_exceeded"
	case errkind.Overload:
		return http.StatusServiceUnavailable, "server_overloaded"
	case errkind.Integrity:
		return http.StatusInternalServerError, "integrity_error"
	case errkind.Unavailable:
		return http.StatusBadGateway, "upstream_unavailable"
	default:
		return http.StatusInternalServerError, "server_error"
	}
}

// errorBody is OpenAI's error object.
type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

func bodyOf(e *errkind.Error) (int, errorBody) {
	status, typ := statusOf(e)
	d := errorDetail{Message: e.Message, Type: typ}
	if e.Param != "" {
		d.Param = &e.Param
	}
	if e.Code != "" {
		d.Code = &e.Code
	}
	return status, errorBody{Error: d}
}

// writeError sends e as an OpenAI error response. Only e.Message, Code and
// Param reach the client; the cause (e.Err) goes to the log alone.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, e *errkind.Error) {
	status, body := bodyOf(e)
	if status >= 500 {
		s.log.ErrorContext(r.Context(), "request failed", "path", r.URL.Path, "status", status, "kind", e.Kind.String(), "code", e.Code, "cause", causeOf(e))
	}
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="bulkhead"`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

// causeOf is the internal cause of e for logs: never content, only what
// the failing layer said.
func causeOf(e *errkind.Error) string {
	if e.Err != nil {
		return e.Err.Error()
	}
	return e.Message
}

func badInput(param, code, format string, args ...any) *errkind.Error {
	e := errkind.New(errkind.BadInput, code, format, args...)
	e.Param = param
	return e
}
