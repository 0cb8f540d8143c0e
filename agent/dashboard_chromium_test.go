package agent_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// Debian's chromium, driven headless by chromedp with a fresh profile.
const chromiumPath = "/usr/bin/chromium"

// mustBrowser starts headless chromium with a fresh profile. No chromium:
// skip, unless CI is set (CI installs it, so then it is a failure).
func mustBrowser(tb testing.TB) context.Context {
	tb.Helper()
	if _, err := exec.LookPath(chromiumPath); err != nil {
		if inCI() {
			tb.Fatalf("CI is set and %s is missing (scripts/deps.sh installs it): %v", chromiumPath, err)
		}
		tb.Skipf("%s not installed (scripts/deps.sh installs it)", chromiumPath)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath),
		chromedp.UserDataDir(tb.TempDir()),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-quic", true),
		chromedp.WindowSize(1280, 900),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	tb.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	// The first Do starts the browser, which lives as long as the context of
	// that call: so no timeout here.
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 900)); err != nil {
		tb.Fatalf("start %s: %v", chromiumPath, err)
	}
	return ctx
}

func mustDo(tb testing.TB, ctx context.Context, steps ...chromedp.Action[chromedp.Void]) {
	tb.Helper()
	tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(tctx, steps...); err != nil {
		tb.Fatal(err)
	}
}

func mustRun[T any](tb testing.TB, ctx context.Context, a chromedp.Action[T]) T {
	tb.Helper()
	tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(tctx, a)
	if err != nil {
		tb.Fatal(err)
	}
	return v
}

// saveScreenshot writes a full-page PNG into the test's artifact directory
// (kept with go test -artifacts, else a temp dir) and logs its path.
func saveScreenshot(tb testing.TB, ctx context.Context, name string) {
	tb.Helper()
	png := mustRun(tb, ctx, chromedp.FullScreenshot(100))
	dir := tb.TempDir()
	if t, ok := tb.(*testing.T); ok {
		dir = t.ArtifactDir()
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		tb.Fatal(err)
	}
	tb.Logf("screenshot: %s", path)
}

// inCI reports whether CI is set (GitHub and most CIs set CI=true).
func inCI() bool {
	switch os.Getenv("CI") {
	case "", "0", "false":
		return false
	}
	return true
}
