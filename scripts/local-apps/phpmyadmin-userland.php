<?php
/*
 * Userland: logs phpMyAdmin into one student's own MariaDB, from the environment of the
 * process that serves it (installed as /etc/phpmyadmin/conf.d/userland.php by
 * scripts/install-local-apps.sh; Debian's config.inc.php includes it last).
 *
 * The variables are the official phpMyAdmin image's, so a Template reads the same either way:
 *   PMA_HOST, PMA_PORT           the student's MariaDB (TCP)
 *   PMA_USER                     their database user; with it, phpMyAdmin logs in by itself
 *   PMA_PASSWORD_FILE            a file holding the password (or PMA_PASSWORD, the password)
 *   USERLAND_PMA_STATE_DIR       a folder of this student's own, for phpMyAdmin's cache
 *                                (set by userland-phpmyadmin)
 * Each value is read per request from this process's environment, so two students'
 * phpMyAdmins side by side (two `php -S` processes) each see their own. Without PMA_USER this
 * file changes nothing (a web server's phpMyAdmin on the same machine keeps its own setup).
 */

declare(strict_types=1);

$userlandUser = getenv('PMA_USER');
if (is_string($userlandUser) && $userlandUser !== '') {
    $userlandPassword = getenv('PMA_PASSWORD');
    $userlandPasswordFile = getenv('PMA_PASSWORD_FILE');
    if (is_string($userlandPasswordFile) && $userlandPasswordFile !== '') {
        // The server writes the file at its first start; until then phpMyAdmin says it
        // cannot log in, and a reload works once the database is up.
        $userlandRead = is_readable($userlandPasswordFile) ? file_get_contents($userlandPasswordFile) : false;
        $userlandPassword = $userlandRead === false ? '' : trim($userlandRead);
    }
    $userlandPassword = is_string($userlandPassword) ? $userlandPassword : '';

    $cfg['Servers'][1]['auth_type'] = 'config';
    $cfg['Servers'][1]['host'] = getenv('PMA_HOST') ?: '127.0.0.1';
    $cfg['Servers'][1]['port'] = getenv('PMA_PORT') ?: '3306';
    $cfg['Servers'][1]['connect_type'] = 'tcp';
    $cfg['Servers'][1]['compress'] = false;
    $cfg['Servers'][1]['user'] = $userlandUser;
    $cfg['Servers'][1]['password'] = $userlandPassword;
    $cfg['Servers'][1]['AllowNoPassword'] = false;
    // Only this server: no server list, no arbitrary servers.
    $cfg['ServerDefault'] = 1;
    $cfg['AllowArbitraryServer'] = false;

    // A secret of this student's own (phpMyAdmin encrypts its cookies with it); derived from
    // their password, so nothing more is stored. Debian's own secret file is readable only by
    // the web server's group.
    $cfg['blowfish_secret'] = substr(hash('sha256', 'userland-phpmyadmin:' . $userlandPassword), 0, 32);

    $userlandState = getenv('USERLAND_PMA_STATE_DIR');
    if (is_string($userlandState) && $userlandState !== '') {
        $cfg['TempDir'] = rtrim($userlandState, '/') . '/tmp';
    }
    // No calls out (no internet here, and no reason to report a student's errors anywhere).
    $cfg['VersionCheck'] = false;
    $cfg['SendErrorReports'] = 'never';
    unset($userlandRead, $userlandPasswordFile, $userlandPassword, $userlandState);
}
unset($userlandUser);
