package main

import (
	"flag"
	"strconv"

	"k8s.io/klog/v2"
)

// setKlogVerbosity sets klog's verbosity for text logs; klog keeps it in
// process-wide state, which only kgenctl run touches.
func setKlogVerbosity(verbosity int) {
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	_ = fs.Set("v", strconv.Itoa(verbosity))
}
