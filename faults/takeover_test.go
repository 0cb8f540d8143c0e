package faults

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/lmwarden/internal/testutil"
)

// TestFrontendOnAnotherServicesPortIsRefused, on every datapath: an
// unrelated service listens on the frontend's port (on every address). The
// warden refuses to start, naming the process, and that service keeps its
// clients; the kernel datapaths would otherwise steer them to the warden
// without binding the port (before: silently, the log naming the shim's
// ephemeral port). With frontend_takeover: true the kernel datapaths take
// the port on purpose, and say which address clients use.
func TestFrontendOnAnotherServicesPortIsRefused(t *testing.T) {
	for _, dp := range datapaths {
		t.Run(dp, func(t *testing.T) { frontendTaken(t, dp) })
	}
}

func frontendTaken(t *testing.T, dp string) {
	if !inNetNS(t) {
		return
	}
	port := frontend[strings.LastIndexByte(frontend, ':'):]
	ln, err := net.Listen("tcp", "0.0.0.0"+port)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) { io.WriteString(rw, "the other service") })}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	other := func() string {
		resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + frontend + "/")
		if err != nil {
			return err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	startReplicas(t, 2, replicaOpts{})
	w := startWarden(t, wardenOpts{Datapath: dp, Replicas: 2, NoWait: true})
	// It exits, or (the build before) starts serving.
	testutil.Eventually(t, 30*time.Second, "the warden to exit or serve", func() bool {
		if !w.running() {
			return true
		}
		resp, err := http.Get("http://" + adminAddr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	state := "serving"
	if !w.running() {
		state = fmt.Sprintf("exited (%v)", w.wait(t, time.Second))
	}
	out := w.out.String()
	named := strings.Contains(out, fmt.Sprintf("pid %d", os.Getpid())) || strings.Contains(out, "address already in use")
	answer := other()
	figure(t, "%s: another service on 0.0.0.0%s, the frontend %s: the warden %s, naming it %v; the service's clients get %q",
		dp, port, frontend, state, named, answer)
	if w.running() || !named || answer != "the other service" {
		t.Errorf("a frontend on another service's port: the warden %s, named %v, its clients got %q\n%s", state, named, answer, out)
	}
	if dp == "user" {
		return // the userspace datapath binds the port itself: taking it over is not possible
	}
	// Told to, the kernel datapath takes the port, and the log names the
	// frontend clients use.
	w.opts.ModelExtra, w.opts.NoWait = "frontend_takeover: true", false
	writeConfig(t, dirOf(w.config), w.opts)
	w.restart(t)
	c := dialFrom(t, "")
	resp, err := c.turn(t, "taken")
	logged := strings.Contains(w.out.String(), "frontend="+frontend+" steered_to=")
	figure(t, "%s: with frontend_takeover: true the warden serves %s (%v, err %v); the log names the frontend clients use %v",
		dp, frontend, resp != nil && resp.StatusCode == 200, err, logged)
	if err != nil || resp.StatusCode != 200 || !logged {
		t.Errorf("with frontend_takeover: %v %v, log names the frontend %v", resp, err, logged)
	}
}
