// Package validate checks every exchange of an http.Client against an OpenAPI document: an
// http.RoundTripper for tests, which records what does not conform instead of failing the call.
package validate

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"sync"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	verrors "github.com/pb33f/libopenapi-validator/errors"
)

type expectInvalid struct{}

// ExpectInvalid marks the requests made with ctx as ones the document must refuse (a test of the agent's
// refusal): such a request is a problem when it conforms. Its answer is still checked.
func ExpectInvalid(ctx context.Context) context.Context {
	return context.WithValue(ctx, expectInvalid{}, true)
}

// Transport validates each request before sending it and each answer before returning it.
type Transport struct {
	base http.RoundTripper
	mu   sync.Mutex
	v    validator.Validator
	log  []string
	bad  []string
}

// New validates exchanges through base against the OpenAPI document doc.
func New(doc []byte, base http.RoundTripper) (*Transport, error) {
	d, err := libopenapi.NewDocument(doc)
	if err != nil {
		return nil, fmt.Errorf("reading the OpenAPI document: %w", err)
	}
	v, errs := validator.NewValidator(d)
	if len(errs) > 0 {
		return nil, fmt.Errorf("building the validator: %v", errs)
	}
	if ok, problems := v.ValidateDocument(); !ok {
		return nil, fmt.Errorf("the document is not valid OpenAPI: %s", describe(problems))
	}
	return &Transport{base: base, v: v}, nil
}

// Exchanges lists every exchange seen ("POST /v1/start 200").
func (t *Transport) Exchanges() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]string(nil), t.log...)
}

// Problems lists what did not conform, one line each.
func (t *Transport) Problems() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]string(nil), t.bad...)
}

func (t *Transport) problem(format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.bad = append(t.bad, fmt.Sprintf(format, args...))
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	var sent []byte
	if req.Body != nil && req.Body != http.NoBody {
		var err error
		if sent, err = io.ReadAll(req.Body); err != nil {
			return nil, err
		}
		req.Body.Close()
		req.Body = io.NopCloser(bytes.NewReader(sent))
	}
	what := req.Method + " " + req.URL.Path
	check := req.Clone(req.Context())
	check.Body = io.NopCloser(bytes.NewReader(sent))
	t.mu.Lock()
	ok, problems := t.v.ValidateHttpRequestSync(check)
	t.mu.Unlock()
	wantInvalid, _ := req.Context().Value(expectInvalid{}).(bool)
	switch {
	case wantInvalid && ok:
		t.problem("%s: the document accepts a request the test expects it to refuse: %s", what, sent)
	case !wantInvalid && !ok:
		t.problem("%s: the request does not conform: %s: %s", what, describe(problems), sent)
	}
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	t.log = append(t.log, fmt.Sprintf("%s %d", what, resp.StatusCode))
	t.mu.Unlock()

	media, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	answer := *resp
	var received []byte
	if strings.HasPrefix(media, "text/") {
		// A log stream: checked for its status, type and headers, never read here (it may never end).
		answer.Body = io.NopCloser(strings.NewReader(""))
	} else {
		if received, err = io.ReadAll(resp.Body); err != nil {
			resp.Body.Close()
			return nil, err
		}
		resp.Body.Close()
		resp.Body = io.NopCloser(bytes.NewReader(received))
		answer.Body = io.NopCloser(bytes.NewReader(received))
	}
	check = req.Clone(req.Context())
	check.Body = io.NopCloser(bytes.NewReader(sent))
	t.mu.Lock()
	ok, problems = t.v.ValidateHttpResponse(check, &answer)
	t.mu.Unlock()
	if !ok {
		t.problem("%s: the answer (%d) does not conform: %s: %s", what, resp.StatusCode, describe(problems), received)
	}
	return resp, nil
}

func describe(problems []*verrors.ValidationError) string {
	var parts []string
	for _, p := range problems {
		line := p.Message
		if p.Reason != "" {
			line += " (" + p.Reason + ")"
		}
		for _, s := range p.SchemaValidationErrors {
			line += "; " + s.FieldPath + ": " + s.Reason
		}
		parts = append(parts, line)
	}
	return strings.Join(parts, " | ")
}
