package main

import (
	"fmt"
	"html"
	"strings"
)

// chart draws the report as an SVG: on the left the throughput of each chunkup
// contender as a ratio of the direct upload's (with the targets), on the right the CPU
// seconds per GiB of each process (client, chunkup server, Redis, MinIO) for the direct
// uploads and each contender, stacked. Hand-drawn, so the bench needs no plotting
// library.
func (r *report) chart() []byte {
	const (
		width, height = 1000, 460
		top, bottom   = 60, 380 // the plot area's y range
	)
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	text := func(x, y float64, anchor, s string, extra ...string) {
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="%s" %s>%s</text>`+"\n", x, y, anchor, strings.Join(extra, " "), html.EscapeString(s))
	}
	rect := func(x, y, w, h float64, fill string) {
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>`+"\n", x, y, w, h, fill)
	}
	line := func(x1, y1, x2, y2 float64, stroke, dash string) {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-dasharray="%s"/>`+"\n", x1, y1, x2, y2, stroke, dash)
	}
	text(width/2, 22, "middle", fmt.Sprintf("chunkup bench %s — %s", r.When.Format("2006-01-02 15:04 UTC"), r.Machine), `font-size="14"`, `font-weight="bold"`)

	// Left: ratios.
	type bar struct {
		label  string
		value  float64
		target float64
		color  string
	}
	var ratios []bar
	add := func(label string, c comparison, target float64, color string) {
		if c.Unit != "" {
			ratios = append(ratios, bar{label, c.Ratio, target, color})
		}
	}
	add("large adaptive", r.Large, 0.90, "#2b7bb9")
	add("large always", r.LargeAlways, todayLargeRatio, "#9cc3e0")
	add("small adaptive", r.Small, 0.85, "#d9822b")
	add("small always", r.SmallAlways, todaySmallRatio, "#f0c08f")
	x0, plotW := 60.0, 360.0
	text(x0+plotW/2, 44, "middle", "throughput, chunkup / direct (dashed: target)", `font-weight="bold"`)
	maxRatio := 1.2
	for _, br := range ratios {
		maxRatio = max(maxRatio, br.value*1.1)
	}
	y := func(v float64) float64 { return bottom - v/maxRatio*(bottom-top) }
	for v := 0.0; v <= maxRatio+1e-9; v += 0.2 {
		line(x0, y(v), x0+plotW, y(v), "#dddddd", "")
		text(x0-6, y(v)+4, "end", fmt.Sprintf("%.1f", v))
	}
	if len(ratios) > 0 {
		slot := plotW / float64(len(ratios))
		for i, br := range ratios {
			x := x0 + float64(i)*slot + slot*0.15
			w := slot * 0.7
			rect(x, y(br.value), w, bottom-y(br.value), br.color)
			line(x-4, y(br.target), x+w+4, y(br.target), "#c00000", "4 3")
			text(x+w/2, y(br.value)-5, "middle", fmt.Sprintf("%.2f", br.value))
			text(x+w/2, bottom+16, "middle", br.label)
		}
	}
	line(x0, bottom, x0+plotW, bottom, "black", "")

	// Right: CPU seconds per GiB by process.
	var stacks []cpuStack
	if r.Large.Unit != "" {
		stacks = append(stacks, cpuStack{"large direct", r.Large.DirectClientCPUPerGiB, 0, 0, r.Large.DirectMinIOCPUPerGiB})
		stacks = append(stacks, costStack("large adaptive", r.Large.Cost))
		if r.LargeAlways.Unit != "" {
			stacks = append(stacks, costStack("large always", r.LargeAlways.Cost))
		}
	}
	if r.Small.Unit != "" {
		stacks = append(stacks, cpuStack{"small direct", r.Small.DirectClientCPUPerGiB, 0, 0, r.Small.DirectMinIOCPUPerGiB})
		stacks = append(stacks, costStack("small adaptive", r.Small.Cost))
		if r.SmallAlways.Unit != "" {
			stacks = append(stacks, costStack("small always", r.SmallAlways.Cost))
		}
	}
	x1, plotW2 := 520.0, 440.0
	text(x1+plotW2/2, 44, "middle", "CPU seconds per GiB, by process", `font-weight="bold"`)
	maxCPU := 1.0
	for _, s := range stacks {
		maxCPU = max(maxCPU, (s.client+s.server+s.redis+s.minio)*1.1)
	}
	y2 := func(v float64) float64 { return bottom - v/maxCPU*(bottom-top) }
	step := niceStep(maxCPU)
	for v := 0.0; v <= maxCPU+1e-9; v += step {
		line(x1, y2(v), x1+plotW2, y2(v), "#dddddd", "")
		text(x1-6, y2(v)+4, "end", fmt.Sprintf("%.0f", v))
	}
	colors := []string{"#6a994e", "#2b7bb9", "#c00000", "#8d6cab"} // client, server, Redis, MinIO
	if len(stacks) > 0 {
		slot := plotW2 / float64(len(stacks))
		for i, s := range stacks {
			x := x1 + float64(i)*slot + slot*0.15
			w := slot * 0.7
			base := 0.0
			for j, v := range []float64{s.client, s.server, s.redis, s.minio} {
				rect(x, y2(base+v), w, y2(base)-y2(base+v), colors[j])
				base += v
			}
			text(x+w/2, y2(base)-5, "middle", fmt.Sprintf("%.1f", base))
			label := strings.SplitN(s.label, " ", 2)
			text(x+w/2, bottom+16, "middle", label[0])
			text(x+w/2, bottom+30, "middle", label[1])
		}
	}
	line(x1, bottom, x1+plotW2, bottom, "black", "")
	for j, name := range []string{"client", "chunkup server", "Redis", "MinIO"} {
		lx := x1 + float64(j)*110
		rect(lx, height-28, 12, 12, colors[j])
		text(lx+16, height-18, "start", name)
	}
	b.WriteString("</svg>\n")
	return []byte(b.String())
}

// cpuStack is one bar of the CPU chart.
type cpuStack struct {
	label                        string
	client, server, redis, minio float64
}

func costStack(label string, c cost) cpuStack {
	return cpuStack{label, c.ClientCPUPerGiB, c.ServerCPUPerGiB, c.RedisCPUPerGiB, c.MinIOCPUPerGiB}
}

// niceStep is a grid step of 1, 2 or 5 times a power of ten giving about five lines up
// to top.
func niceStep(top float64) float64 {
	step := 1.0
	for top/step > 8 {
		for _, m := range []float64{2, 2.5, 2} {
			step *= m
			if top/step <= 8 {
				break
			}
		}
	}
	return step
}
