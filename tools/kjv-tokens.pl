#!/usr/bin/perl
# The KJV language-model split as token files for data.dataset "tokens" (graphs/specs/gpt-kjv-tokens.json):
# the same bytes as data.dataset "kjv" (models/data/text.hpp, kjv_lm_split: evaluation = the held-out books,
# training = the other books without every 10th verse; verse texts one a line), each byte one uint16
# id, in llm.c's format (docs/gpt.md, "Token files": a 256-int32 header, magic 20240520, version 1,
# the id count, then the ids). Until the tokenizers land, bytes are the vocabulary (256).
# Usage: perl tools/kjv-tokens.pl [KJV_TXT [OUT_DIR]]
#   KJV_TXT: bible(1)'s output (bash tools/zf setup writes /var/tmp/zenflow/kjv.txt, the default)
#   OUT_DIR: where kjv-train.bin and kjv-eval.bin go (default: KJV_TXT's directory); written atomically
use strict;
use warnings;

my $in = $ARGV[0] // '/var/tmp/zenflow/kjv.txt';
my $out = $ARGV[1] // ($in =~ m{^(.*)/[^/]*$} ? $1 : '.');
my %held_out = map { $_ => 1 } qw(Ruth Eccl Lam Joel Jonah Phi Jas 1Jn);  # bible(1)'s abbreviations

open(my $f, '<:raw', $in) or die "kjv-tokens.pl: $in: $!\n";
my ($train, $eval, $i) = ('', '', 0);
while (my $line = <$f>) {
  $line =~ s/\r?\n\z//;
  next if $line eq '';
  $line =~ /^([1-3]?[A-Za-z]+)\d+:\d+ (.+)\z/s
    or die "kjv-tokens.pl: $in:$.: expected bible(1) output (\"Ge1:1 In the beginning ...\")\n";
  if ($held_out{$1}) {
    $eval .= "$2\n";
  } elsif ($i % 10 != 9) {  # every 10th verse is the classifier's (kjv_held_out_verse)
    $train .= "$2\n";
  }
  ++$i;
}
close($f);

sub write_tokens {
  my ($path, $bytes) = @_;
  my $n = length($bytes);
  my $tmp = "$path.tmp.$$";
  open(my $o, '>:raw', $tmp) or die "kjv-tokens.pl: $tmp: $!\n";
  print $o pack('l<3', 20240520, 1, $n), "\0" x (1024 - 12), pack('v*', unpack('C*', $bytes))
    or die "kjv-tokens.pl: $tmp: $!\n";
  close($o) or die "kjv-tokens.pl: $tmp: $!\n";
  rename($tmp, $path) or die "kjv-tokens.pl: $path: $!\n";
  print "kjv-tokens.pl: $path: $n tokens\n";
}
write_tokens("$out/kjv-train.bin", $train);
write_tokens("$out/kjv-eval.bin", $eval);
