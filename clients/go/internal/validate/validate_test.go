package validate

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
)

func checked(t *testing.T, body string) (*Transport, *http.Client, string) {
	doc, err := os.ReadFile("../../openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	v, err := New(doc, http.DefaultTransport)
	if err != nil {
		t.Fatal(err)
	}
	return v, &http.Client{Transport: v}, srv.URL
}

func post(t *testing.T, ctx context.Context, c *http.Client, url, body string) {
	req, _ := http.NewRequestWithContext(ctx, "POST", url+"/v1/stop", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer t")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
}

const stop = `{"namespace": "team-a", "name": "dj-x-s1", "uid": "u"}`

func TestAConformingExchangePasses(t *testing.T) {
	v, c, url := checked(t, `{"outcome": "stopping", "a": null}`)
	post(t, context.Background(), c, url, stop)
	if p := v.Problems(); len(p) != 0 || len(v.Exchanges()) != 1 {
		t.Fatalf("%q %q", p, v.Exchanges())
	}
}

func TestWhatDoesNotConformIsReported(t *testing.T) {
	v, c, url := checked(t, `{"outcome": "stopping", "a": null, "surprise": 1}`)
	post(t, context.Background(), c, url, `{"namespace": "team-a", "name": "dj-x-s1", "uid": "u", "job_id": 1}`)
	p := v.Problems()
	if len(p) != 2 || !strings.Contains(p[0], "request does not conform") || !strings.Contains(p[1], "answer (200) does not conform") {
		t.Fatalf("%q", p)
	}
}

func TestARequestExpectedInvalidMustBe(t *testing.T) {
	v, c, url := checked(t, `{"outcome": "stopping", "a": null}`)
	post(t, ExpectInvalid(context.Background()), c, url, stop)
	if p := v.Problems(); len(p) != 1 || !strings.Contains(p[0], "expects it to refuse") {
		t.Fatalf("%q", p)
	}
	v, c, url = checked(t, `{"outcome": "stopping", "a": null}`)
	post(t, ExpectInvalid(context.Background()), c, url, `{"namespace": "team-a"}`)
	if p := v.Problems(); len(p) != 0 {
		t.Fatalf("%q", p)
	}
}
