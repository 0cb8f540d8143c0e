package adminapi

import (
	"encoding/json"
	"net/http"
)

// WriteJSON writes v with status code as both admin servers (the warden's
// and the endpoint picker's) write every body: indented, because operators
// read it with curl, and marked no-store, because it is a live snapshot.
func WriteJSON(rw http.ResponseWriter, code int, v any) {
	rw.Header().Set("Content-Type", "application/json")
	rw.Header().Set("Cache-Control", "no-store")
	rw.WriteHeader(code)
	enc := json.NewEncoder(rw)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// WriteError writes the admin API's error body, {"error": "..."}.
func WriteError(rw http.ResponseWriter, code int, err error) {
	WriteJSON(rw, code, map[string]string{"error": err.Error()})
}
