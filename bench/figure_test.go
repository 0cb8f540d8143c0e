package bench

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// Log axes label values between the decades: 0.2 s can be read.
func TestLogTicksLabelOneTwoFive(t *testing.T) {
	var got []string
	for _, tk := range (logTicks{}).Ticks(0.15, 30) {
		if tk.Label != "" {
			got = append(got, tk.Label)
		}
	}
	if strings.Join(got, " ") != "0.2 0.5 1 2 5 10 20" {
		t.Errorf("labels over 0.15-30: %q", got)
	}
	got = nil
	for _, tk := range (logTicks{}).Ticks(78, 175) { // less than a decade: round linear steps
		if tk.Label != "" {
			got = append(got, tk.Label)
		}
	}
	if strings.Join(got, " ") != "100 150" {
		t.Errorf("labels over 78-175: %q", got)
	}
}

// The plots of a run: Okabe-Ito colours only, the fallback fonts named,
// two panels for TTFT, and "simulated" on a virtual run's axes.
func TestPlotsUseThePaletteAndSaySimulated(t *testing.T) {
	dir := t.TempDir()
	r := runVirtualForPlots(t, dir)
	if !r.simulated() {
		t.Fatal("a virtual run is simulated")
	}
	palette := map[string]bool{}
	for _, c := range okabeIto {
		palette[strings.ToLower(string([]byte{hex(c.R >> 4), hex(c.R & 15), hex(c.G >> 4), hex(c.G & 15), hex(c.B >> 4), hex(c.B & 15)}))] = true
	}
	stroke := regexp.MustCompile(`stroke:#([0-9a-f]{6})`)
	for _, name := range []string{PlotTTFT, PlotHitRate, PlotThroughput, PlotTask} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		svg := string(b)
		if !strings.Contains(svg, "font-family:'Liberation Sans',Arimo,Arial,Helvetica,sans-serif;") {
			t.Errorf("%s: no font fallback", name)
		}
		if name != PlotHitRate && !strings.Contains(svg, "simulated") { // a hit rate has no time in it
			t.Errorf("%s: does not say its times are simulated", name)
		}
		for _, m := range stroke.FindAllStringSubmatch(svg, -1) {
			c := m[1]
			if !palette[c] && c != "000000" && !grey(c) {
				t.Errorf("%s: colour #%s is neither Okabe-Ito nor grey", name, c)
				break
			}
		}
	}
	ttft, _ := os.ReadFile(filepath.Join(dir, PlotTTFT))
	if !strings.Contains(string(ttft), ", p50") || !strings.Contains(string(ttft), ", p95") {
		t.Error("ttft.svg: not split into p50 and p95 panels")
	}
}

func runVirtualForPlots(t *testing.T, dir string) *Report {
	t.Helper()
	rep, err := RunVirtual(context.Background(), VirtualConfig{
		Profile: mustProfile(t, "a4000-qwen3-4b"), Replicas: 2, Steps: Sessions(2, 4), Duration: 60 * time.Second,
		Arms: mustArms(t, "off,on"), Seed: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := rep.Write(dir); err != nil {
		t.Fatal(err)
	}
	return rep
}

func hex(n uint8) byte { return "0123456789abcdef"[n] }

func grey(c string) bool { return c[0:2] == c[2:4] && c[2:4] == c[4:6] }
