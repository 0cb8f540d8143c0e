package bodykey

// scanner walks a JSON chat request just far enough to find its start,
// over a prefix that may end anywhere. It validates only what it must to
// know where each value ends.
type scanner struct {
	b       []byte
	i       int
	sys     text
	user    text
	sysSeen bool // a system block came before the first user message
	done    bool // the first user message's text is in user
}

// maxDepth bounds the nesting the scanner follows (a body nested deeper
// before its first user message has no start it looks for).
const maxDepth = 32

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }

// peek skips white space and returns the next byte.
func (s *scanner) peek() (byte, error) {
	for s.i < len(s.b) && isSpace(s.b[s.i]) {
		s.i++
	}
	if s.i >= len(s.b) {
		return 0, ErrShort
	}
	return s.b[s.i], nil
}

func (s *scanner) expect(c byte) error {
	got, err := s.peek()
	if err != nil {
		return err
	}
	if got != c {
		return ErrNoStart
	}
	s.i++
	return nil
}

// str scans a string and returns its content's span, as far as the
// prefix holds it (with ErrShort when it ends inside).
func (s *scanner) str() (from, to int, err error) {
	if err := s.expect('"'); err != nil {
		return 0, 0, err
	}
	from = s.i
	for s.i < len(s.b) {
		switch c := s.b[s.i]; {
		case c == '"':
			s.i++
			return from, s.i - 1, nil
		case c == '\\':
			if s.i+1 >= len(s.b) {
				return from, s.i, ErrShort
			}
			s.i += 2
		case c < 0x20:
			return from, s.i, ErrNoStart
		default:
			s.i++
		}
	}
	return from, s.i, ErrShort
}

// skip passes over one value.
func (s *scanner) skip(depth int) error {
	c, err := s.peek()
	if err != nil {
		return err
	}
	if depth > maxDepth {
		return ErrNoStart
	}
	switch c {
	case '"':
		_, _, err := s.str()
		return err
	case '{':
		return s.object(func(_, _ int) error { return s.skip(depth + 1) })
	case '[':
		return s.array(func(int) error { return s.skip(depth + 1) })
	}
	for s.i < len(s.b) {
		switch c := s.b[s.i]; {
		case c == ',' || c == '}' || c == ']' || isSpace(c):
			return nil
		case c == '{' || c == '[' || c == '"' || c == ':':
			return ErrNoStart
		}
		s.i++
	}
	return ErrShort
}

// object scans an object, calling field for each member with its key's
// span once the colon is passed; field must consume the value. It stops
// early, without error, once s.done.
func (s *scanner) object(field func(kf, kt int) error) error {
	if err := s.expect('{'); err != nil {
		return err
	}
	if c, err := s.peek(); err != nil || c == '}' {
		s.i++
		return err
	}
	for {
		kf, kt, err := s.str()
		if err != nil {
			return err
		}
		if err := s.expect(':'); err != nil {
			return err
		}
		if err := field(kf, kt); err != nil || s.done {
			return err
		}
		c, err := s.peek()
		if err != nil {
			return err
		}
		s.i++
		switch c {
		case '}':
			return nil
		case ',':
		default:
			return ErrNoStart
		}
	}
}

// array scans an array, calling elem for each element (which must consume
// it); it stops early, without error, once s.done.
func (s *scanner) array(elem func(k int) error) error {
	if err := s.expect('['); err != nil {
		return err
	}
	if c, err := s.peek(); err != nil || c == ']' {
		s.i++
		return err
	}
	for k := 0; ; k++ {
		if err := elem(k); err != nil || s.done {
			return err
		}
		c, err := s.peek()
		if err != nil {
			return err
		}
		s.i++
		switch c {
		case ']':
			return nil
		case ',':
		default:
			return ErrNoStart
		}
	}
}

func (s *scanner) key(kf, kt int, name string) bool { return string(s.b[kf:kt]) == name }

// request scans the top-level object for "system" and "messages".
func (s *scanner) request() error {
	s.sys.max, s.user.max = MaxSystem, MaxUser
	err := s.object(func(kf, kt int) error {
		switch {
		case s.key(kf, kt, "system") && !s.sysSeen:
			s.sysSeen = true
			return s.systemValue(&s.sys)
		case s.key(kf, kt, "messages"):
			return s.messages()
		}
		return s.skip(1)
	})
	switch {
	case s.done && s.user.n > 0:
		return nil
	case err != nil:
		return err
	}
	return ErrNoStart
}

// systemValue reads Anthropic's system: a string, or blocks of which the
// first one's text counts.
func (s *scanner) systemValue(t *text) error {
	c, err := s.peek()
	if err != nil {
		return err
	}
	switch c {
	case '"':
		from, to, err := s.str()
		t.add(s.b, from, to)
		return err
	case '[':
		return s.array(func(k int) error {
			if k > 0 {
				return s.skip(2)
			}
			return s.block(t)
		})
	}
	return s.skip(1)
}

// block reads one content block: its "text" (a plain string block counts
// as its own text).
func (s *scanner) block(t *text) error {
	c, err := s.peek()
	if err != nil {
		return err
	}
	switch c {
	case '"':
		from, to, err := s.str()
		t.add(s.b, from, to)
		return err
	case '{':
		return s.object(func(kf, kt int) error {
			if !s.key(kf, kt, "text") {
				return s.skip(3)
			}
			if c, err := s.peek(); err != nil || c != '"' {
				return s.skip(3)
			}
			from, to, err := s.str()
			t.add(s.b, from, to)
			return err
		})
	}
	return s.skip(3)
}

// messages reads the messages up to the first user message: a system or
// developer message before it is the system block.
func (s *scanner) messages() error {
	return s.array(func(int) error {
		cur := text{max: max(MaxUser, MaxSystem)}
		role := ""
		err := s.object(func(kf, kt int) error {
			switch {
			case s.key(kf, kt, "role"):
				from, to, err := s.str()
				if err == nil {
					role = string(s.b[from:to])
				}
				return err
			case s.key(kf, kt, "content"):
				err := s.content(&cur)
				if err == ErrShort && role == "user" && cur.n >= MaxUser {
					s.user, s.done = cur.cut(MaxUser), true // enough of it is held
					return nil
				}
				return err
			}
			return s.skip(2)
		})
		if err != nil {
			return err
		}
		switch {
		case role == "user":
			s.user, s.done = cur.cut(MaxUser), true
		case (role == "system" || role == "developer") && !s.sysSeen:
			s.sysSeen, s.sys = true, cur.cut(MaxSystem)
		}
		return nil
	})
}

// content reads a message's content: a string, or blocks whose texts all
// count (up to the bound).
func (s *scanner) content(t *text) error {
	c, err := s.peek()
	if err != nil {
		return err
	}
	switch c {
	case '"':
		from, to, err := s.str()
		t.add(s.b, from, to)
		return err
	case '[':
		return s.array(func(int) error { return s.block(t) })
	}
	return s.skip(2)
}
