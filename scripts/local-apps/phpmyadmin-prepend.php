<?php
/*
 * Run before each request by userland-phpmyadmin (PHP's auto_prepend_file). Debian's
 * config.inc.php writes an error to the log on every request when it cannot read the web
 * server's secret (/var/lib/phpmyadmin/blowfish_secret.inc.php, readable by www-data only,
 * which a student's phpMyAdmin never needs: conf.d/userland.php sets its own), and it uses a
 * check_file_access() defined before it when there is one. This one answers the same, quietly.
 */

declare(strict_types=1);

function check_file_access(string $path): bool
{
    return is_readable($path);
}
