# What the tests of client-side tracking (068's kin: 069, 072) ask of a
# Redis and of a session: rlock's command connection as CLIENT LIST shows
# it, tracking armed towards rlock's subscriber, and a commit that must
# fail because its lock was lost.
package RlockTest::Tracking;

use strict;
use warnings;

use Exporter 'import';
use Test::More;
use RlockTest;

our @EXPORT_OK = qw(command_field armed commit_fails);

# A field of what CLIENT LIST says of rlock's command connection on
# $redis ('' if it is not there)
sub command_field
{
	my ($redis, $field) = @_;
	my ($line) = grep { / name=rlock_command / } split /\n/,
	  $redis->cmd('CLIENT', 'LIST');
	return defined $line && $line =~ / \Q$field\E=(\S+)/ ? $1 : '';
}

# Tracking comes on within 15 s, redirected to the subscriber rlock has
# then
sub armed
{
	my ($redis) = @_;
	return RlockTest::wait_until(
		sub {
			my $sub = $redis->client_id('rlock_subscriber') // -2;
			command_field($redis, 'flags') =~ /t/
			  && command_field($redis, 'redir') eq $sub;
		},
		15);
}

# A commit of $s that must fail because $key was lost, 100 ms after the
# change (an announcement that arrives is handled by then)
sub commit_fails
{
	my ($s, $key, $what) = @_;
	$s->query_safe('SELECT pg_sleep(0.1)');
	$s->query('COMMIT');
	my $ok = like($s->{stderr}, qr/lock "\Q$key\E" was lost/, $what);
	$s->{stderr} = '';
	return $ok;
}

1;
