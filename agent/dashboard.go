package agent

import (
	"embed"
	"io/fs"
	"net/http"
)

// The dashboard is three static files (agent/web: index.html, style.css,
// app.js) compiled into the binary, so the page works on an air-gapped host
// and nothing is fetched from any other origin. Plain HTML, CSS and
// JavaScript: it is two views and a table, and without a framework there is
// no build step and nothing third-party to audit or keep up to date.
//
//go:embed web
var dashboardFiles embed.FS

// DashboardHandler serves the dashboard's files: mount it at "GET /" of the
// admin server (the API paths are more specific and win).
func DashboardHandler() http.Handler {
	sub, err := fs.Sub(dashboardFiles, "web")
	if err != nil {
		panic(err) // the embedded tree always has web/
	}
	files := http.FileServerFS(sub)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		// Only this origin: the page must not load anything from elsewhere.
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; base-uri 'none'; frame-ancestors 'none'; form-action 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		// Embedded files carry no modification time: ask the browser to
		// revalidate, so a new binary's page is never mixed with an old one's.
		h.Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	})
}
