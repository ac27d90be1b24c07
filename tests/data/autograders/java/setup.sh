#!/bin/sh
# Gradescope runs setup.sh once when it builds the grader's image; in Userland the image is
# built by the course (FROM debian:12-slim, COPY this folder, RUN ./setup.sh). This sample needs a
# JDK (javac and java; no JUnit: its harness is plain Java) and setpriv (util-linux); no account
# for the student: the harness (root) runs the student's code as a uid of each run's own
# (docs/grading.md).
set -e
if ! command -v javac >/dev/null 2>&1; then
  apt-get update && apt-get install -y --no-install-recommends openjdk-17-jdk-headless
fi
