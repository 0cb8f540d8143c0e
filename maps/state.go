package maps

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"

	"github.com/lmwarden/lmwarden/bpf"
)

// DefaultDir is where a warden pins its state.
const DefaultDir = "/sys/fs/bpf/lmwarden"

// Options say where the state lives and which network namespace's
// sk_lookup hook the dispatcher attaches to.
type Options struct {
	Dir   string // pinned state directory on bpffs; DefaultDir if empty
	NetNS string // a network namespace file; /proc/self/ns/net if empty
}

func (o Options) dir() string {
	if o.Dir == "" {
		return DefaultDir
	}
	return filepath.Clean(o.Dir)
}

func (o Options) netns() string {
	if o.NetNS == "" {
		return "/proc/self/ns/net"
	}
	return o.NetNS
}

// State is a warden's handle on its pinned kernel state. Closing it leaves
// everything pinned and attached (traffic keeps flowing, and with the shim's
// listener gone sk_lookup fails open); Unload removes it.
type State struct {
	dir      string
	lock     *dirLock
	objs     bpf.LmwardenObjects
	dispatch link.Link
	verdict  link.Link
	ends     endWaiters
	// Reused is true when a previous warden's state was found and adopted.
	Reused bool
}

// Load adopts the state pinned at opts.Dir, or creates it atomically: the
// maps and links are pinned into a temporary directory next to it, the
// programs are attached, and only then is the directory renamed into
// place, so a reader never sees half a state. The returned State holds an
// exclusive lock on the directory until Close: a second warden gets
// ErrLocked.
func Load(opts Options) (*State, error) {
	dir := opts.dir()
	parent := filepath.Dir(dir)
	if err := checkBPFFS(parent); err != nil {
		return nil, err
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, fmt.Errorf("%w: memlock: %v", ErrUnsupported, err)
	}
	// The parent lock serialises creation against a concurrent Load or
	// Unload; it is held only for the duration of this call.
	plock, err := lockDir(parent, true)
	if err != nil {
		return nil, err
	}
	defer plock.unlock()

	if _, err := os.Stat(dir); err == nil {
		if _, err := os.Stat(filepath.Join(dir, pinVerdictLink)); err == nil {
			return adopt(dir, opts)
		}
		// A directory without the last pin create writes: made empty by
		// root for a warden that runs unprivileged (it may not write the
		// parent to rename into place), or left by a crash mid-way.
		// Build the state in place under the directory's lock; pinned
		// maps already there (sessions) are reused.
		return createInPlace(dir, opts)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	return create(dir, opts)
}

func createInPlace(dir string, opts Options) (_ *State, err error) {
	s := &State{dir: dir}
	if s.lock, err = lockDir(dir, false); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	if err := s.loadObjects(dir); err != nil {
		return nil, err
	}
	if err := s.attach(dir, opts); err != nil {
		return nil, err
	}
	return s, chmodPins(dir)
}

// attach attaches both programs and pins their links into dir, the
// verdict's last: its pin marks a complete state.
func (s *State) attach(dir string, opts Options) error {
	ns, err := os.Open(opts.netns())
	if err != nil {
		return err
	}
	defer ns.Close()
	s.dispatch, err = link.AttachNetNs(int(ns.Fd()), s.objs.LmwDispatch)
	if err != nil {
		return fmt.Errorf("%w: attach sk_lookup: %v", ErrUnsupported, err)
	}
	if err := s.dispatch.Pin(filepath.Join(dir, pinDispatchLink)); err != nil {
		return err
	}
	s.verdict, err = link.AttachRawLink(link.RawLinkOptions{
		Target:  s.objs.LmwSocks.FD(),
		Program: s.objs.LmwVerdict,
		Attach:  ebpf.AttachSkSKBStreamVerdict,
	})
	if err != nil {
		return fmt.Errorf("%w: attach sk_skb verdict: %v", ErrUnsupported, err)
	}
	return s.verdict.Pin(filepath.Join(dir, pinVerdictLink))
}

func checkBPFFS(dir string) error {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrUnsupported, dir, err)
	}
	if st.Type != unix.BPF_FS_MAGIC {
		return fmt.Errorf("%w: %s is not a bpffs mount (mount -t bpf bpf /sys/fs/bpf)", ErrUnsupported, dir)
	}
	return nil
}

func loadSpec() (*ebpf.CollectionSpec, error) {
	spec, err := bpf.LoadLmwarden()
	if err != nil {
		return nil, err
	}
	for _, m := range spec.Maps {
		if m.Name == ".rodata" || m.Name == ".bss" || m.Name == ".data" {
			continue
		}
		m.Pinning = ebpf.PinByName
	}
	return spec, nil
}

func create(dir string, opts Options) (_ *State, err error) {
	tmp, err := os.MkdirTemp(filepath.Dir(dir), filepath.Base(dir)+"_tmp_")
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(tmp)
		}
	}()
	s := &State{dir: dir}
	defer func() {
		if err != nil {
			s.closeObjects()
		}
	}()
	if err := s.loadObjects(tmp); err != nil {
		return nil, err
	}
	if err := s.attach(tmp, opts); err != nil {
		return nil, err
	}
	if err := chmodPins(tmp); err != nil {
		return nil, err
	}
	if err := os.Rename(tmp, dir); err != nil {
		return nil, err
	}
	if s.lock, err = lockDir(dir, false); err != nil {
		return nil, err
	}
	return s, nil
}

// adopt reuses a previous warden's pinned maps (sessions included) and
// points its pinned links at freshly loaded programs.
func adopt(dir string, opts Options) (_ *State, err error) {
	s := &State{dir: dir, Reused: true}
	if s.lock, err = lockDir(dir, false); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	if err := s.loadObjects(dir); err != nil {
		return nil, err
	}
	if s.dispatch, err = link.LoadPinnedLink(filepath.Join(dir, pinDispatchLink), nil); err != nil {
		return nil, fmt.Errorf("adopt %s: %w", dir, err)
	}
	if err := s.dispatch.Update(s.objs.LmwDispatch); err != nil {
		return nil, fmt.Errorf("adopt %s: update sk_lookup link: %w", dir, err)
	}
	if s.verdict, err = link.LoadPinnedLink(filepath.Join(dir, pinVerdictLink), nil); err != nil {
		return nil, fmt.Errorf("adopt %s: %w", dir, err)
	}
	if err := s.verdict.Update(s.objs.LmwVerdict); err != nil {
		return nil, fmt.Errorf("adopt %s: update sk_skb link: %w", dir, err)
	}
	return s, nil
}

func (s *State) loadObjects(pinDir string) error {
	spec, err := loadSpec()
	if err != nil {
		return err
	}
	err = spec.LoadAndAssign(&s.objs, &ebpf.CollectionOptions{
		Maps: ebpf.MapOptions{PinPath: pinDir},
	})
	if err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return fmt.Errorf("%w: verifier: %+v", ErrUnsupported, ve)
		}
		return fmt.Errorf("%w: load: %v", ErrUnsupported, err)
	}
	return nil
}

func chmodPins(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if err := os.Chmod(filepath.Join(dir, e.Name()), 0o600); err != nil {
			return err
		}
	}
	return os.Chmod(dir, 0o700)
}

// Dir is the pinned state directory.
func (s *State) Dir() string { return s.dir }

func (s *State) closeObjects() {
	s.ends.close()
	if s.dispatch != nil {
		s.dispatch.Close()
		s.dispatch = nil
	}
	if s.verdict != nil {
		s.verdict.Close()
		s.verdict = nil
	}
	s.objs.Close()
}

// Close releases this process's handles and the lock. The pinned state
// stays: a restarted warden adopts it with Load.
func (s *State) Close() error {
	s.closeObjects()
	s.lock.unlock()
	return nil
}
