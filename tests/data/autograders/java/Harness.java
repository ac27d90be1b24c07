// A Gradescope-style autograder harness in plain Java, written afresh for Userland's tests
// (docs/grading.md). It follows the pattern that keeps a student's code from deciding its score:
//
// - the harness runs as one user (root in the grading container) and the student's code as
//   another, a uid of this run's own that no process uses (AUTOGRADER_STUDENT_USER may name an
//   account instead; docs/grading.md says why not a shared `student`): the student's
//   code cannot write /autograder/results/results.json nor read /autograder/source (the answers,
//   in cases.tsv, mode 0700);
// - the student's classes are compiled as the student (javac -proc:none: no annotation processor
//   of theirs runs), into a folder of the student's, with the teacher's Runner (which calls, and
//   knows no answer);
// - each case runs in a JVM of its own as the student (setpriv), with limits (CPU seconds, file
//   size, processes, heap) and a time limit; the harness compares the last line it printed with
//   the expected answer, so nothing the student's code prints is taken as a result;
// - after each case its processes are killed (the JVM and everything below it), and the harness
//   writes results.json last.
//
// Where it cannot switch users (not root, as under `make run`) it runs the student's code as
// itself and says so in the results' output.

import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

public class Harness {
    static final int OUTPUT_MAX = 8192;
    static final long CASE_SECONDS = 10;

    record Case(String name, String argument, String expected, double points, String visibility) {}

    public static void main(String[] args) throws Exception {
        Path source = Path.of(args[0]).toAbsolutePath();
        Path root = source.getParent();
        Path submission = root.resolve("submission");
        Path results = root.resolve("results");
        String student = System.getenv().getOrDefault("AUTOGRADER_STUDENT_USER", "");
        boolean root_ = "root".equals(System.getProperty("user.name"));
        String ids = "";
        if (root_ && student.isEmpty()) {
            long fresh = freshUid();
            ids = fresh + ":" + fresh;
        } else if (root_) {
            Outcome uid = run(List.of("id", "-u", student), null, 5), gid = run(List.of("id", "-g", student), null, 5);
            if (uid.exit != 0 || gid.exit != 0) {
                System.out.println("refusing to run a student's code as root: there is no account '" + student + "'");
                System.exit(1);
            }
            ids = uid.output.strip() + ":" + gid.output.strip();
        }
        boolean separate = !ids.isEmpty();
        List<Case> cases = readCases(source.resolve("cases.tsv"));
        if (separate) {
            Files.setPosixFilePermissions(source, PosixFilePermissions.fromString("rwx------"));
        }
        // The student's build folder: their classes and the teacher's Runner, nothing else.
        Path build = Files.createTempDirectory("student-build-");
        Files.setPosixFilePermissions(build, PosixFilePermissions.fromString("rwxr-xr-x"));
        List<String> sources = new ArrayList<>();
        try (var files = Files.walk(submission)) {
            files.filter(p -> p.toString().endsWith(".java") && Files.isRegularFile(p))
                 .forEach(p -> sources.add(p.toString()));
        }
        Files.copy(source.resolve("Runner.java"), build.resolve("Runner.java"), StandardCopyOption.REPLACE_EXISTING);
        sources.add(build.resolve("Runner.java").toString());
        Path classes = build.resolve("classes");
        Files.createDirectory(classes);
        if (separate) {
            run(List.of("chown", "-R", ids, build.toString()), null, 10);
        }
        List<String> compile = new ArrayList<>(List.of("javac", "-proc:none", "-nowarn", "-d", classes.toString()));
        compile.addAll(sources);
        Outcome compiled = run(asStudent(ids, compile), build, 60);
        List<String> tests = new ArrayList<>();
        for (Case c : cases) {
            tests.add(compiled.exit == 0 ? runCase(ids, classes, c)
                      : test(c, false, "the code does not compile:\n" + tail(compiled.output)));
        }
        StringBuilder json = new StringBuilder("{\"visibility\": \"visible\", \"tests\": [");
        json.append(String.join(", ", tests)).append("]");
        if (!separate) {
            json.append(", \"output\": ").append(quote("The student's code ran as the harness's own user (this "
                + "grader could not switch users): it was not kept from the harness's files."));
        }
        json.append("}\n");
        Files.createDirectories(results);
        Path temp = results.resolve(".results.json.tmp");
        Files.writeString(temp, json, StandardCharsets.UTF_8);
        Files.move(temp, results.resolve("results.json"), StandardCopyOption.REPLACE_EXISTING,
                   StandardCopyOption.ATOMIC_MOVE);
        run(List.of("rm", "-rf", build.toString()), null, 30);
    }

    // A uid no process uses now, drawn at random: the kernel counts `ulimit -u` over every process
    // of a uid on the node, so copies graded side by side under one shared account would share it
    // (a fork bomb in one would stop the JVMs of the others).
    static long freshUid() throws IOException {
        java.util.Set<Integer> taken = new java.util.HashSet<>();
        try (var entries = Files.list(Path.of("/proc"))) {
            for (Path entry : (Iterable<Path>) entries::iterator) {
                if (!entry.getFileName().toString().chars().allMatch(Character::isDigit)) continue;
                try {
                    taken.add((Integer) Files.getAttribute(entry, "unix:uid"));
                } catch (IOException | UnsupportedOperationException gone) {
                    // ended while listed
                }
            }
        }
        java.security.SecureRandom draw = new java.security.SecureRandom();
        while (true) {
            int uid = 200_000 + draw.nextInt(100_000);
            if (!taken.contains(uid)) return uid;
        }
    }

    static List<Case> readCases(Path file) throws IOException {
        List<Case> found = new ArrayList<>();
        for (String line : Files.readAllLines(file, StandardCharsets.UTF_8)) {
            if (line.isBlank() || line.startsWith("#")) continue;
            String[] f = line.split("\t");
            found.add(new Case(f[0], f[1], f[2], Double.parseDouble(f[3]), f[4]));
        }
        return found;
    }

    static List<String> asStudent(String ids, List<String> command) {
        // Limits for the student's processes: CPU seconds, 1 MB files, a bound on processes (a
        // JVM needs a few dozen threads, which count), and the JVM's own heap bound below.
        String limited = "ulimit -t 10 -f 1024 -u 256; exec \"$@\"";
        List<String> full = new ArrayList<>();
        if (!ids.isEmpty()) {  // uid:gid of the student's user; empty: this harness cannot switch
            String[] both = ids.split(":");
            full.addAll(List.of("setpriv", "--reuid=" + both[0], "--regid=" + both[1], "--clear-groups",
                                "--no-new-privs", "--"));
        }
        full.addAll(List.of("/bin/sh", "-c", limited, "student"));
        full.addAll(command);
        return full;
    }

    static String runCase(String ids, Path classes, Case c) throws Exception {
        List<String> java = List.of("java", "-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                                    "-cp", classes.toString(), "Runner", c.argument());
        Outcome done = run(asStudent(ids, java), classes, CASE_SECONDS);
        if (done.timedOut) {
            return test(c, false, "timed out after " + CASE_SECONDS + " s");
        }
        String printed = done.output.strip();
        String[] lines = printed.split("\n");
        String answer = printed.isEmpty() ? "" : lines[lines.length - 1].strip();
        boolean passed = done.exit == 0 && answer.equals(c.expected());
        String words = passed ? "passed" : "expected " + c.expected() + ", got " + (answer.isEmpty() ? "nothing" : answer);
        if (!passed && !printed.isEmpty() && c.visibility().equals("visible")) {
            words += "\n\n" + tail(printed);
        }
        return test(c, passed, words);
    }

    static String test(Case c, boolean passed, String output) {
        return "{\"name\": " + quote(c.name()) + ", \"score\": " + (passed ? c.points() : 0)
            + ", \"max_score\": " + c.points() + ", \"status\": \"" + (passed ? "passed" : "failed")
            + "\", \"visibility\": " + quote(c.visibility()) + ", \"output\": " + quote(output) + "}";
    }

    record Outcome(int exit, String output, boolean timedOut) {}

    static Outcome run(List<String> command, Path cwd, long seconds) throws IOException, InterruptedException {
        ProcessBuilder builder = new ProcessBuilder(command).redirectErrorStream(true);
        builder.environment().clear();
        builder.environment().put("PATH", "/usr/local/bin:/usr/bin:/bin");
        builder.environment().put("LANG", "C.UTF-8");
        builder.environment().put("HOME", "/tmp");
        if (cwd != null) builder.directory(cwd.toFile());
        Process process = builder.redirectInput(ProcessBuilder.Redirect.from(new java.io.File("/dev/null"))).start();
        byte[] kept = new byte[OUTPUT_MAX];
        int[] size = {0};
        Thread reader = new Thread(() -> {
            try (InputStream in = process.getInputStream()) {
                byte[] chunk = new byte[4096];
                int n;
                while ((n = in.read(chunk)) > 0) {  // read all (the process must not block), keep the first 8 KB
                    int room = Math.min(n, OUTPUT_MAX - size[0]);
                    if (room > 0) { System.arraycopy(chunk, 0, kept, size[0], room); size[0] += room; }
                }
            } catch (IOException e) { /* the process was killed */ }
        });
        reader.start();
        boolean ended = process.waitFor(seconds, TimeUnit.SECONDS);
        process.descendants().forEach(ProcessHandle::destroyForcibly);
        process.destroyForcibly();
        process.waitFor();
        reader.join(5000);
        return new Outcome(ended ? process.exitValue() : -1, new String(kept, 0, size[0], StandardCharsets.UTF_8), !ended);
    }

    static String tail(String text) {
        return text.length() <= 2000 ? text : text.substring(text.length() - 2000);
    }

    static String quote(String text) {
        StringBuilder out = new StringBuilder("\"");
        for (char ch : text.toCharArray()) {
            switch (ch) {
                case '"' -> out.append("\\\"");
                case '\\' -> out.append("\\\\");
                case '\n' -> out.append("\\n");
                case '\r' -> out.append("\\r");
                case '\t' -> out.append("\\t");
                default -> {
                    if (ch < 0x20) out.append(String.format("\\u%04x", (int) ch)); else out.append(ch);
                }
            }
        }
        return out.append('"').toString();
    }
}
