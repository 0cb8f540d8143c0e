package main

import "errors"

func runSimCalibrate(args []string) error { return errors.New("not yet") }
