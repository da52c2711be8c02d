package main

import (
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"math"
	"os"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

type series struct {
	name    string
	samples []sample
}

var palette = []color.RGBA{{31, 119, 180, 255}, {255, 127, 14, 255}}

// plot draws the series as step lines (count over seconds) into a PNG.
func plot(path, title string, ymax int, all ...series) error {
	const w, h, left, right, top, bottom = 900, 520, 70, 20, 40, 50
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	draw.Draw(img, img.Bounds(), image.White, image.Point{}, draw.Src)
	xmax := 0.0
	for _, s := range all {
		if n := len(s.samples); n > 0 && s.samples[n-1].T > xmax {
			xmax = s.samples[n-1].T
		}
	}
	if xmax == 0 {
		xmax = 1
	}
	xmax = niceCeil(xmax)
	px := func(t float64) int { return left + int(t/xmax*float64(w-left-right)) }
	py := func(n int) int { return h - bottom - int(float64(n)/float64(ymax)*float64(h-top-bottom)) }
	grey, black := color.RGBA{220, 220, 220, 255}, color.RGBA{0, 0, 0, 255}
	for i := 0; i <= 5; i++ {
		y := py(ymax * i / 5)
		line(img, left, y, w-right, y, grey, 1)
		label(img, 5, y+4, fmt.Sprint(ymax*i/5), black)
		x := px(xmax * float64(i) / 5)
		line(img, x, top, x, h-bottom, grey, 1)
		label(img, x-10, h-bottom+18, fmt.Sprintf("%.0fs", xmax*float64(i)/5), black)
	}
	line(img, left, h-bottom, w-right, h-bottom, black, 1)
	line(img, left, top, left, h-bottom, black, 1)
	label(img, left, 20, title, black)
	label(img, w/2-60, h-10, "seconds since the first create", black)
	for i, s := range all {
		c := palette[i%len(palette)]
		prevX, prevY := px(0), py(0)
		for _, smp := range s.samples {
			x, y := px(smp.T), py(smp.N)
			line(img, prevX, prevY, x, prevY, c, 2)
			line(img, x, prevY, x, y, c, 2)
			prevX, prevY = x, y
		}
		label(img, w-right-150, top+20+16*i, "-- "+s.name, c)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return png.Encode(f, img)
}

func niceCeil(v float64) float64 {
	mag := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if v <= m*mag {
			return m * mag
		}
	}
	return 10 * mag
}

func line(img *image.RGBA, x0, y0, x1, y1 int, c color.RGBA, width int) {
	dx, dy := abs(x1-x0), -abs(y1-y0)
	sx, sy := sign(x1-x0), sign(y1-y0)
	e := dx + dy
	for {
		for i := 0; i < width; i++ {
			for j := 0; j < width; j++ {
				img.SetRGBA(x0+i, y0+j, c)
			}
		}
		if x0 == x1 && y0 == y1 {
			return
		}
		if e2 := 2 * e; e2 >= dy {
			e += dy
			x0 += sx
		} else {
			e += dx
			y0 += sy
		}
	}
}

func label(img *image.RGBA, x, y int, s string, c color.RGBA) {
	d := &font.Drawer{Dst: img, Src: image.NewUniform(c), Face: basicfont.Face7x13, Dot: fixed.P(x, y)}
	d.DrawString(s)
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

func sign(v int) int {
	switch {
	case v > 0:
		return 1
	case v < 0:
		return -1
	}
	return 0
}
