// The teacher's driver: compiled with the student's Calculator.java and run once per case, as the
// student's user, in a JVM of its own. It calls; it does not know the answers (cases.tsv, which
// only the harness reads, has them) and prints only what the student's code returned.
public class Runner {
    public static void main(String[] args) {
        switch (args[0]) {
            case "add1" -> System.out.println(Calculator.add(2, 3));
            case "add2" -> System.out.println(Calculator.add(-1, 1));
            case "multiply" -> System.out.println(Calculator.multiply(4, 5));
            case "divide" -> System.out.println(Calculator.divide(7, 2));
            case "hidden" -> System.out.println(Calculator.multiply(0, 9));
            default -> throw new IllegalArgumentException(args[0]);
        }
    }
}
