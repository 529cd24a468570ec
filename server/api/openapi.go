package api

import (
	_ "embed"
	"net/http"
)

// openAPIDocument is the OpenAPI 3.1 description of every route this
// handler serves, kept by hand beside the code. TestOpenAPIDocument drives
// every route over a real server and checks each request and answer
// against it, and fails for a route or a status it does not describe.
//
//go:embed openapi.json
var openAPIDocument []byte

// GET /v1/openapi.json: public, like the API's documentation. It holds no
// secret and no configuration of this server, only the shape of the API.
func (h *handler) openAPI(w http.ResponseWriter, _ *http.Request) error {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(openAPIDocument)
	return nil
}
