package bench

import (
	"bytes"
	"image/color"
	"math"
	"os"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// What every bench plot shares: the colour-blind-safe palette, a marker
// and dash per series so that nothing rests on colour alone, log ticks
// that can be read, and a figure of panels with the legend to their
// right, off the data.

// okabeIto is the Okabe-Ito palette (as the dashboard's), ordered so that
// the first series are the most distinct on white; yellow comes last.
var okabeIto = []color.RGBA{
	{0x00, 0x72, 0xb2, 0xff}, // blue
	{0xe6, 0x9f, 0x00, 0xff}, // orange
	{0x00, 0x9e, 0x73, 0xff}, // bluish green
	{0xd5, 0x5e, 0x00, 0xff}, // vermillion
	{0xcc, 0x79, 0xa7, 0xff}, // reddish purple
	{0x56, 0xb4, 0xe9, 0xff}, // sky blue
	{0x00, 0x00, 0x00, 0xff}, // black
	{0xf0, 0xe4, 0x42, 0xff}, // yellow
}

var glyphs = []draw.GlyphDrawer{
	draw.CircleGlyph{}, draw.BoxGlyph{}, draw.TriangleGlyph{}, draw.PyramidGlyph{},
	draw.CrossGlyph{}, draw.PlusGlyph{}, draw.RingGlyph{}, draw.SquareGlyph{},
}

// seriesColor, seriesGlyph and seriesDashes style series i; past the
// palette the colours repeat with a dashed line.
func seriesColor(i int) color.Color      { return okabeIto[i%len(okabeIto)] }
func seriesGlyph(i int) draw.GlyphDrawer { return glyphs[(i+i/len(okabeIto))%len(glyphs)] }
func seriesDashes(i int) []vg.Length {
	if i < len(okabeIto) {
		return nil
	}
	return []vg.Length{vg.Points(5), vg.Points(3)}
}

func grid() *plotter.Grid {
	g := plotter.NewGrid()
	g.Vertical.Color = color.Gray{Y: 225}
	g.Horizontal.Color = color.Gray{Y: 225}
	return g
}

// logTicks labels a log axis so that values between the decades can be
// read: 1, 2 and 5 of every decade over up to three decades (then the
// decades only), minor ticks at the other integers, every integer
// labelled when fewer than two labels would fall in the range, and round
// linear steps within less than a decade.
type logTicks struct{}

func (logTicks) Ticks(lo, hi float64) []plot.Tick {
	if !(lo > 0) || !(hi >= lo) {
		return nil
	}
	if hi/lo < 10 {
		// within a decade the round linear steps read best (80, 100, 120)
		return linearTicks(lo, hi)
	}
	first, last := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
	in := func(v float64) bool { return v >= lo*(1-1e-9) && v <= hi*(1+1e-9) }
	mk := func(labelled func(m int) bool) ([]plot.Tick, int) {
		var ticks []plot.Tick
		n := 0
		for e := first; e <= last; e++ {
			for m := 1; m <= 9; m++ {
				v := float64(m) * math.Pow(10, e)
				if !in(v) {
					continue
				}
				t := plot.Tick{Value: v}
				if labelled(m) {
					t.Label = tickLabel(v)
					n++
				}
				ticks = append(ticks, t)
			}
		}
		return ticks, n
	}
	decades := last - first
	ticks, n := mk(func(m int) bool { return m == 1 || (decades <= 3 && (m == 2 || m == 5)) })
	if n < 2 {
		ticks, _ = mk(func(int) bool { return true })
	}
	return ticks
}

// linearTicks labels 3 to 6 round values (1, 2 or 5 times a power of
// ten apart) between lo and hi, with a minor tick half way.
func linearTicks(lo, hi float64) []plot.Tick {
	raw := (hi - lo) / 4
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	step := 10 * p
	for _, m := range []float64{1, 2, 5} {
		if m*p >= raw {
			step = m * p
			break
		}
	}
	var ticks []plot.Tick
	for v := math.Ceil(lo/step*2) * step / 2; v <= hi*(1+1e-9); v += step / 2 {
		t := plot.Tick{Value: v}
		if k := v / step; math.Abs(k-math.Round(k)) < 1e-6 {
			t.Label = tickLabel(math.Round(k) * step)
		}
		ticks = append(ticks, t)
	}
	return ticks
}

// percentTicks marks a 0-1 axis every 10%, labelled every 20%.
type percentTicks struct{}

func (percentTicks) Ticks(lo, hi float64) []plot.Tick {
	var ticks []plot.Tick
	for k := 0; k <= 10; k++ {
		v := float64(k) / 10
		if v < lo-1e-9 || v > hi+1e-9 {
			continue
		}
		t := plot.Tick{Value: v}
		if k%2 == 0 {
			t.Label = strconv.Itoa(k*10) + "%"
		}
		ticks = append(ticks, t)
	}
	return ticks
}

// tickLabel writes 0.2, 1, 20, 300 (never 2e-01).
func tickLabel(v float64) string {
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// legendEntry is one legend line: its text and the thumbnails drawn before it.
type legendEntry struct {
	name   string
	thumbs []plot.Thumbnailer
}

type legendEntries []legendEntry

// figure is one SVG: panels side by side, then the legend in a column of
// its own at the right.
type figure struct {
	panels []*plot.Plot
	legend legendEntries
	w, h   vg.Length
}

func (f *figure) save(path string) error {
	c := vgsvg.New(f.w, f.h)
	dc := draw.New(c)
	leg := plot.NewLegend()
	leg.Top, leg.Left = true, true
	leg.ThumbnailWidth = vg.Points(28)
	width := vg.Length(0)
	for _, e := range f.legend {
		leg.Add(e.name, e.thumbs...)
		width = max(width, leg.TextStyle.Width(e.name))
	}
	legW := vg.Length(0)
	if len(f.legend) > 0 {
		legW = width*1.15 + leg.ThumbnailWidth + 3*leg.Padding + vg.Points(14)
	}
	area := draw.Crop(dc, 0, -legW, 0, 0)
	tiles := draw.Tiles{Rows: 1, Cols: len(f.panels), PadX: vg.Points(14), PadRight: vg.Points(4), PadTop: vg.Points(2)}
	for i, p := range f.panels {
		p.Draw(tiles.At(area, i, 0))
	}
	if legW > 0 {
		// level with the panels' data: below their titles
		leg.YOffs = -vg.Points(34)
		leg.Draw(draw.Crop(dc, f.w-legW, 0, 0, 0))
	}
	var buf bytes.Buffer
	if _, err := c.WriteTo(&buf); err != nil {
		return err
	}
	// The layout is measured with Liberation Sans; a viewer without it
	// falls back to a metric-compatible Arial or Helvetica, else to its
	// sans-serif (wider, hence the margin in the legend's column).
	// Embedding the font would cost half a megabyte a plot.
	svg := bytes.ReplaceAll(buf.Bytes(), []byte("font-family:Liberation Sans;"),
		[]byte("font-family:'Liberation Sans',Arimo,Arial,Helvetica,sans-serif;"))
	return os.WriteFile(path, svg, 0o644)
}

// Plots are set in Liberation Sans (gonum's metrics ship with it): a
// sans-serif reads better at small sizes than the default serif.
func init() {
	plot.DefaultFont = font.Font{Typeface: "Liberation", Variant: "Sans"}
}
