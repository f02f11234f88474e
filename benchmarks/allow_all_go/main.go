// An admission webhook that allows everything at once, in Go: the floor of any webhook, whatever its
// language (benchmarks/webhook_apiserver_bench.py builds and starts it; standard library only).
package main

import (
	"crypto/tls"
	"encoding/json"
	"flag"
	"log"
	"net/http"
)

type review struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Request    *struct {
		UID string `json:"uid"`
	} `json:"request,omitempty"`
	Response map[string]any `json:"response,omitempty"`
}

func allow(w http.ResponseWriter, r *http.Request) {
	var in review
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.Request == nil {
		http.Error(w, "not an AdmissionReview", http.StatusBadRequest)
		return
	}
	out := review{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview",
		Response: map[string]any{"uid": in.Request.UID, "allowed": true}}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

func main() {
	addr := flag.String("address", "127.0.0.1:0", "host:port to serve on")
	cert := flag.String("tls-cert-file", "", "serving certificate (PEM)")
	key := flag.String("tls-private-key-file", "", "its key (PEM)")
	flag.Parse()
	mux := http.NewServeMux()
	mux.HandleFunc("POST /validate", allow)
	mux.HandleFunc("POST /mutate", allow)
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	server := &http.Server{Addr: *addr, Handler: mux, TLSConfig: &tls.Config{MinVersion: tls.VersionTLS12}}
	log.Fatal(server.ListenAndServeTLS(*cert, *key))
}
