package agent

import (
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

func TestDashboardServesItsEmbeddedFiles(t *testing.T) {
	srv := httptest.NewServer(DashboardHandler())
	t.Cleanup(srv.Close)
	for path, wantType := range map[string]string{
		"/":          "text/html",
		"/app.js":    "text/javascript",
		"/style.css": "text/css",
	} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || len(body) == 0 {
			t.Errorf("GET %s: %s, %d bytes", path, resp.Status, len(body))
		}
		if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, wantType) {
			t.Errorf("GET %s: Content-Type %q, want %s", path, ct, wantType)
		}
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") {
			t.Errorf("GET %s: Content-Security-Policy %q, want default-src 'self'", path, csp)
		}
	}
}

// The page must work on a host without internet access: nothing it loads
// may come from another origin.
func TestDashboardLoadsNothingFromElsewhere(t *testing.T) {
	// URLs in attributes, CSS url() and fetch/import calls; the SVG
	// namespace is a name, not a fetch.
	remote := regexp.MustCompile(`(?i)(src|href)\s*=\s*["']?(https?:)?//|url\(\s*["']?(https?:)?//|(fetch|import)\(\s*["'](https?:)?//|@import`)
	err := fs.WalkDir(dashboardFiles, "web", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := dashboardFiles.ReadFile(path)
		if err != nil {
			return err
		}
		if m := remote.Find(b); m != nil {
			t.Errorf("%s loads from another origin: %q", path, m)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
