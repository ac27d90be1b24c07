#!/bin/sh
# Gradescope runs setup.sh once when it builds the grader's image; in Userland the image is
# built by the course (FROM debian:12-slim, COPY this folder, RUN ./setup.sh). This sample needs a
# JDK (javac and java; no JUnit: its harness is plain Java) and setpriv (util-linux), and makes the
# user the student's code runs as (docs/grading.md): the harness is root, the student is not.
set -e
if ! command -v javac >/dev/null 2>&1; then
  apt-get update && apt-get install -y --no-install-recommends openjdk-17-jdk-headless
fi
id student >/dev/null 2>&1 || useradd --uid 2000 --user-group --no-create-home student
